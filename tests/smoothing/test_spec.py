"""The one certification spec: defaults, dict round trip, and one validation for every bad value."""

import json

import pytest

from rs_lightning.smoothing import CertificationSpec, Cohen, InputSpecific
from rs_lightning.smoothing.spec import PROTOCOL_KEYS
from rs_lightning.validation import ConfigError


def test_defaults_and_round_trip():
    spec = CertificationSpec(sigma=0.25)
    assert (spec.n0, spec.n, spec.alpha, spec.precision, spec.sampling, spec.sampler) == (
        100,
        100_000,
        0.001,
        "32",
        "cohen",
        Cohen(),
    )
    stored = json.loads(json.dumps(spec.as_dict()))
    assert CertificationSpec.from_dict(stored) == spec
    iss = CertificationSpec(sigma=0.5, sampling="iss", precision=32)
    assert (
        iss.n0 is None
        and iss.sampler == InputSpecific("ad", 0.05, 1000, 200, False)
        and iss.precision == "32"
    )
    assert CertificationSpec.from_dict(json.loads(json.dumps(iss.as_dict()))) == iss
    assert set(iss.protocol()) == set(PROTOCOL_KEYS)


@pytest.mark.parametrize(
    ("kwargs", "key", "allowed"),
    [
        ({"sigma": 0}, "sigma", "> 0"),
        ({"sigma": float("nan")}, "sigma", "a finite number"),
        ({"sigma": float("inf")}, "sigma", "a finite number"),
        ({"alpha": 0}, "alpha", "open interval"),
        ({"alpha": float("nan")}, "alpha", "a finite number"),
        ({"n": 0}, "n", "integer >= 1"),
        ({"n0": 0}, "n0", "integer >= 1"),
        ({"n": 2.5}, "n", "integer"),
        ({"seed": -1}, "seed", "integer >= 0"),
        ({"batch_size": 0}, "batch_size", "integer >= 1"),
        ({"split": "val"}, "split", "train, test"),
        ({"precision": "fp8"}, "precision", "32, bf16, 16"),
        ({"precision": 64}, "precision", "32, bf16, 16"),
        ({"channels_last": "yes"}, "channels_last", "true or false"),
        ({"compile": 1}, "compile", "true or false"),
        ({"mode": "attack"}, "mode", "certify, predict"),
        ({"sampling": "adaptive"}, "sampling", "cohen, iss"),
        ({"mode": "predict", "n0": 100}, "n0", "unset with mode=predict"),
        ({"mode": "predict", "sampling": "iss"}, "sampling", "cohen with mode=predict"),
        ({"sampling": "iss", "n0": 100}, "n0", "unset with sampling=iss"),
        ({"sampling": "iss", "iss": {"decline": "xd"}}, "iss.decline", "ad, rd"),
        ({"sampling": "iss", "iss": {"max_decline": 0}}, "iss.max_decline", "> 0"),
        ({"sampling": "iss", "iss": {"max_decline": -0.1}}, "iss.max_decline", "> 0"),
        (
            {"sampling": "iss", "iss": {"decline": "rd", "max_decline": 1.0}},
            "iss.max_decline",
            "open interval",
        ),
        ({"sampling": "iss", "iss": {"max_decline": float("nan")}}, "iss.max_decline", "a finite number"),
        ({"sampling": "iss", "n": 1000, "iss": {"k0": 1000}}, "iss.k0", r"\[1, n\) = \[1, 1000\)"),
        ({"sampling": "iss", "iss": {"k0": 0}}, "iss.k0", r"\[1, n\)"),
        ({"sampling": "iss", "iss": {"granularity": 0}}, "iss.granularity", r"\[1, n\]"),
        ({"sampling": "iss", "iss": {"reuse_pilot": "no"}}, "iss.reuse_pilot", "true or false"),
        ({"sampling": "iss", "iss": {"k00": 5}}, "iss", "keys of"),
    ],
)
def test_every_bad_value_is_rejected_naming_key_value_and_range(kwargs, key, allowed):
    values = {"sigma": 0.25} | kwargs  # a sampler's settings as a config gives them: the node of its name
    with pytest.raises(ConfigError, match=rf"^{key}=.* is invalid: {key} must be .*{allowed}"):
        CertificationSpec.from_dict(values)


def test_prefix_names_the_callback_key():
    with pytest.raises(ConfigError, match=r"^callbacks\.certification\.alpha=2"):
        CertificationSpec.from_dict({"alpha": 2}, prefix="callbacks.certification.")


def test_sigma_may_wait_for_the_checkpoint_but_is_validated_when_given():
    spec = CertificationSpec()
    assert spec.sigma is None and spec.with_sigma(0.5).sigma == 0.5
    with pytest.raises(ConfigError, match="^sigma=nan"):
        spec.with_sigma(float("nan"))
