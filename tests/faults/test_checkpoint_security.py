"""A checkpoint is never trusted: wrong files, pickled code, metadata that names things to build or call,
unusable values and misfitting weights give one-line errors, and nothing in the file runs."""

import dataclasses
import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from rs_testing import assert_one_line_error, run_script

from rs_lightning.models.checkpoint import CheckpointError, CheckpointMeta, load_classifier
from rs_lightning.registry import Registry, RegistryError


class Payload:
    """A pickled object: loading it would run code from the file."""

    def __reduce__(self):
        return (print, ("this must never run",))


def test_missing_and_non_checkpoint_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_classifier(tmp_path / "nope.ckpt")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="not a readable checkpoint"):
        load_classifier(tmp_path / "notes.txt")
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    with pytest.raises(CheckpointError, match="not an rs-lightning checkpoint"):
        load_classifier(tmp_path / "foreign.ckpt")


def test_pickled_code_is_refused(tmp_path, capsys):
    torch.save({"rs_lightning": {}, "state_dict": {}, "evil": Payload()}, tmp_path / "evil.ckpt")
    with pytest.raises(CheckpointError, match="weights_only=True refuses"):
        load_classifier(tmp_path / "evil.ckpt")
    assert "must never run" not in capsys.readouterr().out


def _tampered(trained_digits, tmp_path, change):
    checkpoint = torch.load(trained_digits["checkpoint"], weights_only=True)
    change(checkpoint)
    path = tmp_path / "tampered.ckpt"
    torch.save(checkpoint, path)
    return path


def test_weights_that_do_not_fit_the_architecture(trained_digits, tmp_path):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"]["model"].update(hidden=64))
    with pytest.raises(
        CheckpointError, match="do not fit the architecture rs_lightning.models.digits.DigitsCNN"
    ):
        load_classifier(path)


# ---------------------------------------------------------------- metadata that would build or call things
# Before the registry, a config in a weights_only checkpoint could reach
# safe_instantiate (importable under the allowed prefix) with allowed_prefixes='' and a list-of-pairs config
# the nested-_target_ check did not look into, then hydra.utils.instantiate -> Path.touch / open(..., 'w').


def _exploit(victim: Path, created: Path) -> dict:
    """The issue's exploit: creates ``created`` and empties ``victim`` if the loader calls what it names."""
    return {
        "_target_": "rs_lightning.models.checkpoint.safe_instantiate",
        "allowed_prefixes": "",
        "config": [
            ["_target_", "hydra.utils.instantiate"],
            [
                "config",
                [
                    {"_target_": "pathlib.Path.touch", "self": str(created)},
                    {"_target_": "builtins.open", "file": str(victim), "mode": "w"},
                ],
            ],
        ],
    }


@pytest.fixture
def victim(tmp_path) -> tuple[Path, Path]:
    target = tmp_path / "precious.txt"
    target.write_text("precious")
    return target, tmp_path / "created_by_checkpoint"


def _untouched(victim) -> None:
    target, created = victim
    assert target.read_text() == "precious" and not created.exists()


def test_the_instantiate_exploit_in_the_model_config_runs_nothing(trained_digits, tmp_path, victim):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"].update(model=_exploit(*victim)))
    with pytest.raises(CheckpointError, match="not a registered model"):
        load_classifier(path)
    _untouched(victim)
    done = run_script("certify.py", f"checkpoint={path}", f"output_dir={tmp_path / 'out'}", "n=100")
    assert_one_line_error(done, "not a registered model", "rs_lightning.models.lenet.LeNet")
    _untouched(victim)


def test_the_exploit_in_the_data_config_and_the_composite_source_runs_nothing(
    trained_digits, tmp_path, victim
):
    composite = {
        "_target_": "rs_lightning.data.composite.CompositeDataModule",
        "source": {"target": "rs_lightning.models.checkpoint.safe_instantiate", **_exploit(*victim)},
    }
    for n, data in enumerate([_exploit(*victim), composite]):
        path = _tampered(trained_digits, tmp_path, lambda c, d=data: c["rs_lightning"].update(data=d))
        done = run_script("certify.py", f"checkpoint={path}", f"output_dir={tmp_path / f'out{n}'}", "n=100")
        assert_one_line_error(done, "data")
        _untouched(victim)


@pytest.mark.parametrize(
    "target",
    [
        "os.system",
        "builtins.eval",
        "builtins.open",
        "__builtins__.exec",
        "rs_lightning_evil.models.X",
        "rs_lightning.models.LeNet",  # a name of the class, but not the registered one
        "rs_lightning.models.lenet.F.relu",  # an attribute reachable from a registered module
        "rs_lightning.models.lenet.LeNet.__init__",
        "rs_lightning.models.checkpoint.torch.load",
        "rs_lightning.models.checkpoint.safe_instantiate",
        "hydra.utils.instantiate",
        None,
        3,
    ],
)
def test_only_registered_classes_are_built(trained_digits, tmp_path, target):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"]["model"].update(_target_=target))
    with pytest.raises(CheckpointError, match="not a registered model") as raised:
        load_classifier(path)
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"hidden": {"_target_": "os.system", "command": "true"}}, "_target_"),  # nested, in a mapping
        ({"hidden": [{"_target_": "os.system"}]}, "_target_"),  # nested, inside a list
        ({"_args_": ["rm -rf /"]}, "_args_"),  # Hydra's positional arguments
        ({"_partial_": True}, "_partial_"),
        ({"hidden": float("nan")}, "finite"),
        ({"hidden": [[[[[[1]]]]]]}, "nested deeper"),
        ({"no such argument": 1}, "argument names"),
        ({"depth": 3}, "refused"),  # an argument DigitsCNN does not take: one line, no TypeError traceback
    ],
)
def test_arguments_must_be_plain_values_the_class_accepts(trained_digits, tmp_path, arguments, needle):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"]["model"].update(arguments))
    with pytest.raises(CheckpointError, match=needle) as raised:
        load_classifier(path)
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"mean": [0.5], "std": [0.0]}, "std=[0.0] holds a value <= 0"),
        ({"mean": [0.5], "std": [-0.3]}, "<= 0"),
        ({"mean": [0.5], "std": [float("nan")]}, "non-finite"),
        ({"mean": [float("inf")], "std": [0.2]}, "non-finite"),
        ({"mean": [0.5, 0.5], "std": [0.2, 0.2]}, "one value per channel"),
        ({"mean": [0.5], "std": None}, "give both or neither"),
        ({"sigma": 0.0}, "sigma=0.0"),
        ({"sigma": float("nan")}, "sigma=nan"),
        ({"sigma": "0.25"}, "sigma='0.25'"),
        ({"input_shape": [1, 8]}, "input_shape"),
        ({"input_shape": [1, -8, 8]}, "input_shape"),
        ({"num_classes": 0}, "num_classes=0"),
        ({"num_classes": True}, "num_classes=True"),
        ({"pipeline": {"mode": "ars", "mask_width": {"_target_": "os.system"}}}, "_target_"),
        ({"pipeline": {"mode": "nonsense"}}, "pipeline"),
        ({"pipeline": "ars"}, "pipeline='ars' is not a mapping"),
        ({"sigma": None, "pipeline": {"mode": "ars"}}, "sigma=None with a pipeline"),
        ({"seed": [torch.zeros(2)]}, "seed[0] is a Tensor"),
    ],
)
def test_metadata_values_are_checked_in_one_line(trained_digits, tmp_path, change, needle):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"].update(change))
    with pytest.raises(CheckpointError, match=re.escape(needle)) as raised:
        load_classifier(path)
    assert len(str(raised.value).splitlines()) == 1


def test_a_normalization_std_of_zero_in_the_weights_is_refused(trained_digits, tmp_path):
    """The Normalize buffers come from the state dict, not the metadata: a std of 0 there divides by 0."""

    def zero_std(checkpoint):  # metadata with a valid normalization, weights whose std buffer is 0
        checkpoint["rs_lightning"].update(mean=[0.5], std=[0.2])
        checkpoint["state_dict"].update({"model.0.mean": torch.full((1, 1, 1, 1), 0.5)})
        checkpoint["state_dict"].update({"model.0.std": torch.zeros((1, 1, 1, 1))})

    path = _tampered(trained_digits, tmp_path, zero_std)
    with pytest.raises(CheckpointError, match="normalization std <= 0"):
        load_classifier(path)
    done = run_script("certify.py", f"checkpoint={path}", f"output_dir={tmp_path / 'out'}", "n=100")
    assert_one_line_error(done, "std <= 0")


def test_a_checkpoint_cannot_make_certify_download_data(trained_digits, tmp_path):
    from rs_lightning.cli.common import checkpoint_datamodule

    built = []

    class Recorder:
        def build(self, config, key):
            built.append(config)
            raise RegistryError("stop here")

    meta = CheckpointMeta(
        data={"_target_": "rs_lightning.data.mnist.MNISTDataModule", "download": True}, num_classes=10
    )
    import rs_lightning.cli.common as common

    original = common.DATA_MODULES
    common.DATA_MODULES = Recorder()
    try:
        with pytest.raises(CheckpointError, match="stop here"):
            checkpoint_datamodule({"data": None}, meta)
    finally:
        common.DATA_MODULES = original
    assert built == [{"_target_": "rs_lightning.data.mnist.MNISTDataModule", "download": False}]


def test_train_refuses_an_unregistered_class_before_any_work(tmp_path):
    done = run_script("train.py", "model._target_=torch.nn.Identity", f"hydra.run.dir={tmp_path}")
    assert_one_line_error(
        done, "model._target_='torch.nn.Identity'", "entry-point group 'rs_lightning.models'"
    )
    assert not (tmp_path / "checkpoints").exists()


def test_registries_hold_only_project_classes_of_their_kind():
    from lightning.pytorch import LightningDataModule
    from torch import nn

    from rs_lightning.data.registry import DATA_MODULES
    from rs_lightning.models.registry import MODELS

    for registry, base in ((MODELS, nn.Module), (DATA_MODULES, LightningDataModule)):
        for name, cls in registry.classes.items():
            assert isinstance(cls, type) and issubclass(cls, base), name
            assert cls.__module__.startswith("rs_lightning.") and name.startswith("rs_lightning.")
    with pytest.raises(TypeError, match="not a subclass"):
        Registry("model", nn.Module, [print.__class__])


def test_a_good_checkpoint_loads_in_eval_mode_with_normalization(trained_digits):
    model, meta = load_classifier(trained_digits["checkpoint"])
    assert not model.training and meta.sigma == 0.25
    assert model(torch.rand(2, 1, 8, 8)).shape == (2, 10)


def test_checkpoint_datamodule_sets_up_npz_data_and_checks_classes(tmp_path):
    import numpy as np
    from omegaconf import OmegaConf

    from rs_lightning.cli.common import checkpoint_datamodule
    from rs_lightning.validation import ConfigError

    rng = np.random.default_rng(0)
    path = tmp_path / "tiny.npz"
    np.savez(
        path,
        x_train=rng.integers(0, 256, (6, 4, 4), dtype=np.uint8),
        y_train=np.arange(6) % 3,
        x_test=rng.integers(0, 256, (3, 4, 4), dtype=np.uint8),
        y_test=np.arange(3),
    )
    meta = CheckpointMeta(
        data={"_target_": "rs_lightning.data.npz.NpzDataModule", "path": str(path)}, num_classes=3
    )
    datamodule = checkpoint_datamodule(OmegaConf.create({"data": None}), meta)
    assert datamodule.num_classes == 3 and len(datamodule.dataset("test")) == 3
    with pytest.raises(ConfigError, match="4 classes"):
        checkpoint_datamodule(OmegaConf.create({"data": None}), dataclasses.replace(meta, num_classes=4))
    # an (N, 1, 8, 8) dataset for a (1, 4, 4) network fails here, not deep inside a convolution
    shapes = r"a dataset of \(1, 8, 8\) inputs like the checkpoint's, not \(1, 4, 4\)"
    with pytest.raises(ConfigError, match=shapes):
        checkpoint_datamodule(
            OmegaConf.create({"data": None}), dataclasses.replace(meta, input_shape=[1, 8, 8])
        )


# ---------------------------------------------------------------- refused pickles: their object, no advice


class Instance:
    """An object of a class of this test module: the safe unpickler refuses to build it."""


class System:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


@pytest.mark.parametrize(
    ("payload", "name"),
    [
        (Payload(), "print"),
        (Instance(), f"{__name__}.Instance"),
        (System(), f"{os.system.__module__}.system"),
    ],
)
def test_a_refused_pickle_names_its_object_and_never_advises_weights_only_false(tmp_path, payload, name):
    """Catches: the name extraction missing torch 2.x's messages for a blocked module (``os.system``:
    "Trying to load unsupported GLOBAL posix.system"), so the error quoted torch's advice to re-run with
    weights_only=False, which would run the file's code, and never named the object."""
    path = tmp_path / "evil.ckpt"
    torch.save({"rs_lightning": {}, "state_dict": {}, "evil": payload}, path)
    with pytest.raises(CheckpointError) as raised:
        load_classifier(path)
    message = str(raised.value)
    assert f"it would have to build {name})" in message and "\n" not in message
    for advice in ("weights_only=False", "`False`", "add_safe_globals"):
        assert advice not in message


def test_a_raw_pickle_is_refused_in_one_line_without_torch_warnings(tmp_path):
    """Catches: a plain ``pickle.dump`` file (protocol 4) gave torch's protocol UserWarning on stderr as well
    as the error (two lines), and an "Unsupported operand" that did not say what the file is."""
    path = tmp_path / "raw.ckpt"
    path.write_bytes(pickle.dumps(System(), protocol=4))
    done = run_script("certify.py", f"checkpoint={path}", f"output_dir={tmp_path / 'out'}")
    assert_one_line_error(done, "a pickle, not torch.save's format")
    assert "weights_only=False" not in done.stderr and "must never run" not in done.stdout


# ---------------------------------------------------------------- metadata asking for more than the file


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (
            lambda c: c["rs_lightning"].update(num_classes=10**12),
            "model.1.classifier.3.weight has shape (10, 128) in the file, (1000000000000, 128) for that",
        ),
        (
            lambda c: c["rs_lightning"]["model"].update(hidden=10**11),
            "model.1.classifier.1.weight has shape (128, 1024) in the file, (100000000000, 1024)",
        ),
        (lambda c: c["state_dict"].pop("model.1.classifier.3.bias"), "model.1.classifier.3.bias is missing"),
        (lambda c: c["state_dict"].update({"model.1.extra": torch.zeros(3)}), "holds model.1.extra (3,)"),
        (  # ARS's mask is built from the metadata too: a static mask of the input's size, absent here
            lambda c: c["rs_lightning"].update(pipeline={"mode": "static"}),
            "mask.weight is missing from the file, the metadata's architecture has it with shape (1, 1, 8",
        ),
    ],
)
def test_metadata_that_does_not_fit_the_weights_is_refused_before_anything_is_allocated(
    trained_digits, tmp_path, change, needle
):
    """Catches: ``num_classes=10**12`` or ``model.hidden=10**11`` in a checkpoint's metadata built the
    architecture for real first (an allocation traceback, exit 1); it is now built on the meta device and
    compared with the file's weights, and the first misfit named in one line."""
    path = _tampered(trained_digits, tmp_path, change)
    with pytest.raises(CheckpointError, match="do not fit the architecture") as raised:
        load_classifier(path)
    assert needle in str(raised.value) and "\n" not in str(raised.value)


def test_certify_refuses_a_huge_num_classes_in_one_line(trained_digits, tmp_path):
    """Catches: certify.py on a checkpoint whose metadata claims 10**12 classes ended in an allocation
    traceback with exit status 1."""
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"].update(num_classes=10**12))
    done = run_script("certify.py", f"checkpoint={path}", f"output_dir={tmp_path / 'out'}", "n=100")
    assert_one_line_error(done, "(1000000000000, 128) for that metadata")


def test_certify_checks_the_data_before_building_the_model(trained_digits, tmp_path, monkeypatch):
    """Catches: certify.py built the checkpoint's model before comparing its class count with the data, so
    a class count the data does not have was allocated first."""
    import numpy as np
    from rs_testing import certify_config

    import rs_lightning.cli.certify as cli_certify
    from rs_lightning.validation import ConfigError

    rng = np.random.default_rng(0)
    data = tmp_path / "three.npz"
    np.savez(
        data,
        x_train=rng.integers(0, 256, (6, 8, 8), dtype=np.uint8),
        y_train=np.arange(6) % 3,
        x_test=rng.integers(0, 256, (3, 8, 8), dtype=np.uint8),
        y_test=np.arange(3),
    )

    def never(*args, **kwargs):
        raise AssertionError("the model was built before the data was checked")

    monkeypatch.setattr(cli_certify, "classifier_from_checkpoint", never)
    checkpoint = Path(trained_digits["checkpoint"])
    cfg = certify_config(tmp_path / "out", checkpoint, ["data=npz", f"data.path={data}"])
    with pytest.raises(ConfigError, match="a dataset with 10 classes like the checkpoint's, not 3"):
        cli_certify.load_model_and_data(cfg, checkpoint, torch.device("cpu"))
