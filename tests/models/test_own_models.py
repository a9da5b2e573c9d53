"""A user's own architecture: registered by an installed package's entry point (the test package in
``user_package/``), built by name from timm or torchvision, started from local weights files; trained by
every method and certified, while a checkpoint naming a class nobody registered imports nothing."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from rs_testing import REPO, SMALL, assert_one_line_error, certify_config, train_config

from rs_lightning.cli.certify import certify
from rs_lightning.cli.common import user_error
from rs_lightning.cli.train import build_method, train
from rs_lightning.data import DigitsDataModule
from rs_lightning.models.checkpoint import CHECKPOINT_KEY, load_classifier
from rs_lightning.models.registry import MODELS
from rs_lightning.models.weights import load_weights
from rs_lightning.registry import RegistryError
from rs_lightning.validation import ConfigError

USER_PACKAGE = Path(__file__).parent / "user_package"
TINYNET = "rsl_user_models.nets.TinyNet"
OWN_MODEL = ["model=custom", f"model._target_={TINYNET}", "+model.width=8"]


@pytest.fixture
def installed(monkeypatch):
    """The test package as pip would install it: on sys.path, with its .dist-info; uninstalled after (the
    registry forgets the classes it loaded, the modules are dropped)."""
    monkeypatch.syspath_prepend(str(USER_PACKAGE))
    monkeypatch.setattr(MODELS, "classes", dict(MODELS.classes))
    yield USER_PACKAGE
    for name in [m for m in sys.modules if m.startswith("rsl_")]:
        del sys.modules[name]


def run_with(script: str, *overrides: str, pythonpath: Path | None = None, marker: Path | None = None):
    """An entry point as a user runs it, with the test package installed (on PYTHONPATH) or not."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    if marker is not None:
        env["RSL_IMPORT_MARKER"] = str(marker)
    return subprocess.run(
        [sys.executable, str(REPO / script), *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_an_entry_point_registers_a_class_and_loads_it_only_when_named(installed):
    """Catches: entry points loaded eagerly (every installed package imported on startup), or not at all."""
    assert "rsl_user_models.nets" not in sys.modules
    assert TINYNET in MODELS and TINYNET in MODELS.installed()
    assert "rsl_user_models.nets" not in sys.modules  # listed, not imported
    net = MODELS.build({"_target_": TINYNET, "width": 4}, "model", input_shape=(1, 8, 8), num_classes=3)
    assert net(torch.zeros(2, 1, 8, 8)).shape == (2, 3)


def test_without_the_package_the_name_is_refused_with_how_to_register():
    with pytest.raises(RegistryError) as refused:
        MODELS.lookup(TINYNET, "model")
    message = str(refused.value)
    assert "not a registered model" in message and '[project.entry-points."rs_lightning.models"]' in message


def test_train_refuses_an_unregistered_class_saying_how_to_register(tmp_path):
    with pytest.raises(ConfigError, match="entry-point group 'rs_lightning.models'"):
        train(train_config(tmp_path, ["model=custom", "model._target_=rsl_unregistered.Net"]))


@pytest.mark.parametrize(
    "name",
    [
        "gaussian",
        "clean",
        "consistency",
        "macer",
        "smoothadv",
        "smoothmix",
        "catrs",
        "acr_gaming",
        "discard_hard",
        "reweight",
        "sphere_attack",
    ],
)
def test_every_method_trains_a_registered_user_model(installed, tmp_path, name):
    """Catches: a method that assumes a shipped architecture (an attribute, a layer name) or a checkpoint
    that records a user model it cannot rebuild. The methods' own overrides keep each step quick."""
    from methods.test_every_method import METHODS

    overrides = [f"method={name}", *METHODS[name][0], *OWN_MODEL, "debug=fast_dev_run", "logger=none"]
    result = train(train_config(tmp_path, overrides))
    assert torch.isfinite(torch.tensor(result["metrics"]["train/loss_step"]))
    model, meta = load_classifier(result["checkpoint"])
    assert meta.model["_target_"] == TINYNET and type(model[-1]).__name__ == "TinyNet"


def test_a_user_model_trains_and_certifies_through_the_entry_points(tmp_path):
    """train.py and certify.py as a user runs them with the package installed; without it, the checkpoint
    is refused in one line that says how to register the class."""
    train_dir = tmp_path / "train"
    done = run_with(
        "train.py",
        *OWN_MODEL,
        "optim.max_epochs=2",
        f"hydra.run.dir={train_dir}",
        "trainer.enable_progress_bar=false",
        "logger=none",
        pythonpath=USER_PACKAGE,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    checkpoint = train_dir / "checkpoints" / "last.ckpt"
    done = run_with(
        "certify.py",
        f"checkpoint={checkpoint}",
        f"output_dir={tmp_path / 'c'}",
        "device=cpu",
        *SMALL,
        pythonpath=USER_PACKAGE,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((tmp_path / "c" / "certify.tsv").read_text().splitlines()) == 1 + 36
    done = run_with("certify.py", f"checkpoint={checkpoint}", f"output_dir={tmp_path / 'd'}", "device=cpu")
    assert_one_line_error(done, TINYNET, "not a registered model", "rs_lightning.models")
    assert not (tmp_path / "d" / "certify.tsv").exists()


def test_a_checkpoint_naming_an_unregistered_importable_class_imports_nothing(trained_digits, tmp_path):
    """Catches: a loader that imports whatever module a checkpoint names (here one that is importable and
    leaves a marker when imported), instead of only classes an installed package registered."""
    saved = torch.load(trained_digits["checkpoint"], weights_only=True)
    saved[CHECKPOINT_KEY]["model"] = {"_target_": "rsl_unregistered.Net"}
    torch.save(saved, tmp_path / "foreign.ckpt")
    marker = tmp_path / "imported"
    done = run_with(
        "certify.py",
        f"checkpoint={tmp_path / 'foreign.ckpt'}",
        f"output_dir={tmp_path / 'c'}",
        "device=cpu",
        pythonpath=USER_PACKAGE,
        marker=marker,
    )
    assert_one_line_error(done, "rsl_unregistered.Net", "not a registered model", "entry-point group")
    assert not marker.exists()


def test_a_timm_model_by_name_trains_records_and_certifies(tmp_path):
    """``model=timm model.name=test_resnet``: built from timm's config (no download), recorded in the
    checkpoint by name, rebuilt from it and certified."""
    result = train(
        train_config(tmp_path / "t", ["model=timm", "model.name=test_resnet", "debug=fast_dev_run"])
    )
    model, meta = load_classifier(result["checkpoint"])
    assert meta.model["_target_"] == "rs_lightning.models.byname.TimmModel"
    assert meta.model["name"] == "test_resnet" and meta.input_shape == [1, 8, 8]
    data = DigitsDataModule()
    assert (meta.mean, meta.std) == (data.mean, data.std)  # the data's normalization, as for shipped models
    summary = certify(certify_config(tmp_path / "c", result["checkpoint"], [*SMALL, "max=40"]))
    assert summary["num_inputs"] == 4


def test_a_torchvision_model_by_name_takes_a_one_channel_input(tmp_path):
    cfg = train_config(tmp_path, ["model=torchvision", "model.name=resnet18"])
    data = DigitsDataModule(batch_size=4)
    data.setup("fit")
    method = build_method(cfg, data)
    assert method.model(torch.rand(2, 1, 8, 8)).shape == (2, 10)
    with pytest.raises(Exception) as refused:  # noqa: B017 (Hydra wraps it; the CLI prints the cause)
        build_method(train_config(tmp_path, ["model=torchvision", "model.name=no_such_net"]), data)
    assert "torchvision classification model" in str(user_error(refused.value))


def _timm_state(seed: int) -> dict:
    import timm

    torch.manual_seed(seed)
    return timm.create_model("test_resnet", pretrained=False, num_classes=10, in_chans=1).state_dict()


@pytest.mark.parametrize("suffix", [".safetensors", ".pt"])
def test_model_weights_from_a_local_file_are_the_starting_point(tmp_path, suffix):
    """Catches: weights that are read but not applied (or applied to the wrong module: the file holds
    timm's own keys, the wrapper's are under ``net.``), or a training run that starts from random ones."""
    state = _timm_state(seed=123)
    path = tmp_path / f"w{suffix}"
    if suffix == ".safetensors":
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    cfg = train_config(tmp_path, ["model=timm", "model.name=test_resnet", f"model.weights={path}"])
    data = DigitsDataModule(batch_size=4)
    data.setup("fit")
    net = build_method(cfg, data).model[-1].net
    for key, tensor in state.items():
        assert torch.equal(net.state_dict()[key], tensor), key


def test_bad_weights_files_are_one_line_before_any_work(tmp_path):
    """Missing, for another architecture, non-finite, or a pickle with code: each one line, exit 2."""
    common = ["model=timm", "model.name=test_resnet", f"hydra.run.dir={tmp_path / 'run'}"]
    done = run_with("train.py", *common, f"model.weights={tmp_path / 'none.pt'}")
    assert_one_line_error(done, "model.weights=", "an existing weights file")
    torch.save({"fc.weight": torch.zeros(3, 3)}, tmp_path / "other.pt")
    done = run_with("train.py", *common, f"model.weights={tmp_path / 'other.pt'}")
    assert_one_line_error(done, "weights are for another architecture", "missing")
    nan = _timm_state(seed=0)
    nan[next(iter(nan))] = nan[next(iter(nan))] * float("nan")
    torch.save(nan, tmp_path / "nan.pt")
    done = run_with("train.py", *common, f"model.weights={tmp_path / 'nan.pt'}")
    assert_one_line_error(done, "NaN or infinite")
    (tmp_path / "code.pt").write_bytes(pickle.dumps(os.system))
    done = run_with("train.py", *common, f"model.weights={tmp_path / 'code.pt'}")
    assert_one_line_error(done, "weights_only=True")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_load_weights_matches_names_and_shapes_exactly(tmp_path):
    from torch import nn

    net = nn.Linear(3, 2)
    torch.save({"weight": torch.zeros(2, 4), "bias": torch.zeros(2)}, tmp_path / "w.pt")
    with pytest.raises(ConfigError, match=r"weight has shape \(2, 4\) in the file"):
        load_weights(net, tmp_path / "w.pt")
    torch.save({"state_dict": {"weight": torch.ones(2, 3), "bias": torch.ones(2)}}, tmp_path / "l.ckpt")
    load_weights(net, tmp_path / "l.ckpt")  # a Lightning-style file: its state_dict
    assert torch.equal(net.weight, torch.ones(2, 3))
