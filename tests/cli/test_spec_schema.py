"""The certification spec's schema (the fields of CertificationSpec) against what follows it: the config files
(conf/certify.yaml, conf/callbacks/default.yaml), the callback's keywords, Smooth's keywords, RunRecord."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
from omegaconf import OmegaConf
from rs_testing import CONF

from rs_lightning.callbacks import CertificationCallback
from rs_lightning.callbacks.certification import DEFAULTS, FIXED, KEYS
from rs_lightning.runs.record import IDENTITY_KEYS, RunRecord
from rs_lightning.smoothing import SAMPLERS, CertificationSpec, Smooth
from rs_lightning.smoothing.smooth import KEYS as SMOOTH_KEYS
from rs_lightning.smoothing.spec import FROM_MODEL, PROTOCOL_KEYS

CERTIFY_RUN_KEYS = {
    "defaults",
    "checkpoint",
    "checkpoint_format",
    "checkpoint_normalization",
    "diffusion",
    "skip",
    "start",
    "max",
    "shard",
    "override_sigma",
    "quantize",
    "device",
    "radius_step",
    "output_dir",
    "hydra",
}
"""certify.py's own keys, which are not the spec's: the model and data to certify, the inputs, where the run
goes and how it is split (a new key of conf/certify.yaml is one of these or a spec key)."""

LINKED = {"seed": "${seed}"}
"""Values the callback's config takes from the training config instead of a default: it certifies with the
training run's seed."""


def effective(key: str, value):
    """What ``value`` of ``key`` makes of the spec: a config's ``null`` and ``32`` mean the spec's None and
    "32", so values are compared as the spec holds them once built."""
    return getattr(CertificationSpec.from_dict({key: value}), key)


def disagreements(node: dict, keys, defaults: dict, linked: dict | None = None) -> list[str]:
    """How a config node's spec keys differ from the schema: a key missing, a default that builds another
    spec value, a key the model decides (σ, noise, norm) not left null; and each sampler's node, whose keys
    and defaults must be the sampler's."""
    linked = linked or {}
    found = [f"{key}: missing" for key in keys if key not in node]
    for key in (k for k in keys if k in node):
        value = node[key]
        if key in linked:
            found += [] if value == linked[key] else [f"{key}: {value!r}, not {linked[key]!r}"]
        elif key in FROM_MODEL and value is not None:
            found.append(f"{key}: {value!r}, not null (the model decides it)")
        elif effective(key, value) != effective(key, defaults[key]):
            found.append(f"{key}: {value!r}, the schema's default is {defaults[key]!r}")
    for name, cls in SAMPLERS.items():
        settings = node.get(name)
        if settings is None:
            continue
        expected = cls.defaults()
        if set(settings) != set(expected):
            found.append(f"{name}: keys {sorted(settings)}, the sampler's are {sorted(expected)}")
            continue
        for key, value in settings.items():
            value = tuple(value) if isinstance(value, list) else value
            if value != expected[key]:
                found.append(f"{name}.{key}: {value!r}, the sampler's default is {expected[key]!r}")
    return found


def certify_yaml() -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "certify.yaml"), resolve=False)


def callback_yaml() -> dict:
    node = OmegaConf.load(CONF / "callbacks" / "default.yaml").certification
    return OmegaConf.to_container(node, resolve=False)


def callback_parameters() -> set[str]:
    return set(inspect.signature(CertificationCallback.__init__).parameters) - {"self", "settings"}


def test_certify_yaml_has_every_spec_key_at_the_schemas_default():
    conf = certify_yaml()
    assert disagreements(conf, CertificationSpec.keys(config=True), CertificationSpec.defaults()) == []
    extra = set(conf) - set(CertificationSpec.keys(config=True)) - set(SAMPLERS) - CERTIFY_RUN_KEYS
    assert not extra, f"conf/certify.yaml keys that are neither the spec's nor certify.py's: {sorted(extra)}"


def test_the_callback_config_has_the_callbacks_keys_at_its_defaults():
    """The callback takes the spec's keys but :data:`FIXED`, at the spec's defaults but :data:`DEFAULTS`."""
    node = callback_yaml()
    defaults = CertificationSpec.defaults() | DEFAULTS
    assert disagreements(node, KEYS, defaults, LINKED) == []
    extra = set(node) - {"_target_"} - set(KEYS) - set(SAMPLERS) - callback_parameters()
    assert not extra, f"conf/callbacks/default.yaml certification keys the callback does not take: {extra}"
    assert set(DEFAULTS) <= set(KEYS) and set(KEYS) == set(CertificationSpec.keys(config=True)) - set(FIXED)


def test_the_check_sees_each_kind_of_disagreement():
    """Catches a check that passes whatever the config says."""
    conf = certify_yaml()
    keys, defaults = CertificationSpec.keys(config=True), CertificationSpec.defaults()
    without_alpha = {k: v for k, v in conf.items() if k != "alpha"}
    assert disagreements(without_alpha, keys, defaults) == ["alpha: missing"]
    assert disagreements(conf | {"n": 1000}, keys, defaults) == ["n: 1000, the schema's default is 100000"]
    assert disagreements(conf | {"noise": "gaussian"}, keys, defaults)[0].startswith("noise: 'gaussian', not")
    iss = conf["iss"] | {"k0": 5}
    assert disagreements(conf | {"iss": iss}, keys, defaults) == ["iss.k0: 5, the sampler's default is None"]
    node = callback_yaml() | {"n": 100_000}
    expected = ["n: 100000, the schema's default is 256"]
    assert disagreements(node, KEYS, defaults | DEFAULTS, LINKED) == expected


@pytest.mark.parametrize("key", FIXED)
def test_the_callback_refuses_the_keys_it_fixes(key):
    with pytest.raises(TypeError, match=key):
        CertificationCallback(**{key: CertificationSpec.defaults()[key]})


def test_the_callback_spec_defaults_are_the_schemas_but_its_overrides():
    spec = CertificationCallback().spec
    assert spec == CertificationSpec(**DEFAULTS)


def test_smooth_takes_the_spec_keys_of_a_smoothed_classifier():
    assert SMOOTH_KEYS == ("precision", "channels_last", "compile", "norm", "noise")
    with pytest.raises(TypeError, match="unexpected keyword arguments \\['alpha'\\]"):
        Smooth(object(), 10, 0.25, alpha=0.01)


def test_the_record_holds_the_spec_fields_first_and_derives_its_identity():
    """RunRecord's first fields are the spec's (in its order), not a second declaration of them; the keys a
    resume must match are the spec's identity keys (σ) and the record's own (the checkpoint, model, data,
    device type and whether the inputs were quantized)."""
    names = [f.name for f in dataclasses.fields(RunRecord)]
    spec_names = [f.name for f in dataclasses.fields(CertificationSpec)]
    assert names[: len(spec_names)] == spec_names
    assert set(IDENTITY_KEYS) == {"sigma", "checkpoint_sha256", "model", "data", "device", "quantized"}
    assert not set(PROTOCOL_KEYS) & {"sigma", "batch_size", "channels_last", "compile"}
    assert RunRecord(**CertificationSpec(sigma=0.5).as_dict()).spec == CertificationSpec(sigma=0.5)
