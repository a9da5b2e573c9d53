"""Bad input gives one line ``error: ...`` naming the value and the fix, exit status 2, no traceback:
unset ``???`` values, unusable data files, unwritable output folders, GPU trainers without GPUs, resume
checkpoints."""

import gzip
import os
import subprocess

import numpy as np
import pytest
import torch
from hydra.errors import InstantiationException
from omegaconf import OmegaConf
from rs_testing import REPO, assert_one_line_error, compose_config, run_script

from rs_lightning.cli.common import (
    USER_ERRORS,
    check_trainer_config,
    missing_keys,
    require_no_missing,
    require_writable_dir,
    run_or_exit,
    user_error,
)
from rs_lightning.data import DataFormatError, NpzDataModule, read_idx
from rs_lightning.models.checkpoint import CHECKPOINT_KEY, CheckpointError, check_training_checkpoint
from rs_lightning.validation import ConfigError, MissingValueError


def run(script: str, *overrides: str) -> subprocess.CompletedProcess:
    return run_script(script, *overrides)


# ---------------------------------------------------------------- entry points, as users run them


def test_train_cli_without_npz_path(tmp_path):
    line = assert_one_line_error(run("train.py", "data=npz", f"hydra.run.dir={tmp_path}"))
    assert line == "error: data.path is missing: set data.path=..."


@pytest.mark.parametrize("script", ["train.py", "certify.py", "soft_labels.py"])
@pytest.mark.parametrize("folder", ["/proc/forbidden", "/proc/forbidden/${now:%H-%M}"])
def test_an_unwritable_hydra_run_dir_is_one_line(script, folder):
    """Hydra used to create its run folder before the entry point ran, and failed with its traceback."""
    done = run(script, f"hydra.run.dir={folder}", "checkpoint=x.ckpt")
    assert_one_line_error(done, f"hydra.run.dir='{folder}'", "writable folder")


def test_a_quoted_run_dir_is_checked_as_hydra_reads_it(tmp_path, monkeypatch):
    """Lightning's DDP subprocess command passes ``hydra.run.dir="<dir>"``: the check before Hydra must read
    it unquoted, as Hydra does (it created an empty folder named ``"<dir>"`` in the working directory)."""
    from rs_lightning.cli.common import exit_if_run_dir_unwritable

    monkeypatch.chdir(tmp_path)
    exit_if_run_dir_unwritable(['hydra.run.dir="runs/a b"', "hydra.sweep.dir='sweeps/c'"])
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "runs",
        "runs/a b",
        "sweeps",
        "sweeps/c",
    ]


def test_certify_cli_with_unwritable_output_dir_alone():
    """output_dir=X alone makes X Hydra's run folder too (certify.py), so it is checked before Hydra."""
    done = run("certify.py", "checkpoint=x.ckpt", "output_dir=/proc/forbidden")
    assert_one_line_error(done, "output_dir='/proc/forbidden'", "writable folder")


def test_report_bad_out_and_radii_are_one_line(tmp_path, capsys):
    from rs_lightning.cli.report import main as report_main

    runs = [str(p) for p in sorted((REPO / "docs" / "results" / "mnist_structured" / "runs").iterdir())[:2]]
    done = run_script("-m rs_lightning.cli.report", *runs, "--out", "/proc/forbidden/report")
    assert_one_line_error(done, "--out='/proc/forbidden/report'", "writable folder")
    for radius in ("-1", "nan", "inf"):  # the same code path in-process (a subprocess each is slow)
        assert report_main([*runs, "--out", str(tmp_path / "r"), "--radii", "0", radius]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"error: --radii={float(radius)} is invalid")
    assert not (tmp_path / "r").exists()


def test_certify_cli_with_unwritable_output_dir(tmp_path):
    done = run(
        "certify.py",
        "checkpoint=null",
        "model=constant",
        "data=digits",
        "sigma=0.25",
        "output_dir=/proc/forbidden",
        f"hydra.run.dir={tmp_path}",
    )
    assert_one_line_error(done, "output_dir='/proc/forbidden'", "writable folder")


# ---------------------------------------------------------------- 1. unset mandatory values (???)


def test_missing_keys_are_found_without_resolving():
    cfg = OmegaConf.create(
        {"data": {"path": "???", "n": 1}, "items": [1, "???"], "link": "${data.path}", "none": None}
    )
    assert missing_keys(cfg) == ["data.path", "items[1]"]
    with pytest.raises(
        MissingValueError, match=r"^data.path and items\[1\] are missing: set data.path=\.\.\."
    ):
        require_no_missing(cfg)
    assert missing_keys(compose_config("train")) == []
    assert missing_keys(compose_config("train", ["data=npz"])) == ["data.path"]
    assert missing_keys(compose_config("certify")) == ["checkpoint"]
    assert missing_keys(compose_config("soft_labels", ["checkpoint=x.ckpt"])) == []


def test_missing_value_raised_during_work_is_a_user_error(capsys):
    cfg = OmegaConf.create({"data": {"path": "???"}})
    try:
        cfg.data.path  # noqa: B018
    except Exception as err:
        raw = err
    assert str(user_error(raw)) == "data.path is missing: set data.path=..."
    wrapped = InstantiationException("while instantiating")
    wrapped.__cause__ = raw
    assert isinstance(user_error(wrapped), MissingValueError)

    def work(_cfg):
        return _cfg.data.path

    with pytest.raises(SystemExit) as exited:
        run_or_exit(work, OmegaConf.create({"data": {"path": "???"}}))
    assert exited.value.code == 2
    assert capsys.readouterr().err == "error: data.path is missing: set data.path=...\n"


# ---------------------------------------------------------------- 2. data files with unusable content


def _arrays(rng=None) -> dict:
    rng = rng or np.random.default_rng(0)
    return {
        "x_train": rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
        "y_train": np.arange(12) % 3,
        "x_test": rng.integers(0, 256, (4, 28, 28), dtype=np.uint8),
        "y_test": np.arange(4) % 3,
    }


def _drop(key):
    return lambda a: {k: v for k, v in a.items() if k != key}


def _nan(a):
    x = a["x_train"].astype(np.float32) / 255
    x[0, 0, 0] = np.nan
    return {**a, "x_train": x}


@pytest.mark.parametrize(
    ("change", "array", "fix"),
    [
        (_drop("y_test"), "y_test", "numpy.savez("),
        (lambda a: {**a, "x_train": a["x_train"] / 255.0}, "x_train must be uint8", ".astype(numpy.uint8)"),
        (_nan, "x_train must be uint8", "1 NaN/inf"),
        (lambda a: {**a, "y_test": -a["y_test"] - 1}, "y_test has negative labels", "0..K-1"),
        (
            lambda a: {**a, "class_names": np.array(["a", "b"])},
            "y_train has labels up to 2",
            "one name per class",
        ),
        (
            lambda a: {**a, "x_train": a["x_train"].reshape(12, 784), "x_test": a["x_test"].reshape(4, 784)},
            "x_train",
            "x.reshape(-1, 28, 28)",
        ),
        (
            lambda a: {**a, "y_train": a["y_train"][:-1]},
            "y_train has 11 labels but x_train has 12",
            "one label",
        ),
        (lambda a: {**a, "y_train": np.eye(3)[a["y_train"]]}, "y_train", "y.argmax(1)"),
        (
            lambda a: {**a, "x_train": np.zeros((12, 3, 32, 32), np.uint8)},
            "x_train looks channels-first",
            "x.transpose(0, 2, 3, 1)",
        ),
        (  # was "num_samples should be a positive integer" from the DataLoader, mid-run
            lambda a: {**a, "x_test": a["x_test"][:0], "y_test": a["y_test"][:0]},
            "x_test holds no images",
            "at least one image",
        ),
        (
            lambda a: {**a, "x_train": a["x_train"][:0], "y_train": a["y_train"][:0]},
            "x_train holds no images",
            "at least one image",
        ),
    ],
)
def test_npz_content_errors_name_file_array_and_fix(tmp_path, change, array, fix):
    path = tmp_path / "bad.npz"
    np.savez(path, **change(_arrays()))
    with pytest.raises(DataFormatError) as err:
        NpzDataModule(str(path)).setup()
    message = str(err.value)
    assert str(path) in message and array in message and fix in message, message
    assert "\n" not in message


def test_npz_files_that_are_not_archives(tmp_path):
    (tmp_path / "text.npz").write_text("hello")
    with pytest.raises(DataFormatError, match="is not a numpy .npz archive"):
        NpzDataModule(str(tmp_path / "text.npz")).setup()
    np.save(tmp_path / "one.npy", np.zeros(3))
    with pytest.raises(DataFormatError, match="single array"):
        NpzDataModule(str(tmp_path / "one.npy")).setup()
    np.savez(tmp_path / "objects.npz", **_arrays(), class_names=np.array(["a", 1, None], dtype=object))
    with pytest.raises(DataFormatError, match="array class_names in .* is unreadable"):
        NpzDataModule(str(tmp_path / "objects.npz")).setup()


def test_npz_config_errors_name_the_key(tmp_path):
    np.savez(tmp_path / "ok.npz", **_arrays())
    with pytest.raises(ConfigError, match=r"^data.mean=\[0.1, 0.2\] is invalid: data.mean must be 1 value"):
        NpzDataModule(str(tmp_path / "ok.npz"), mean=[0.1, 0.2], std=[1, 1]).setup()
    with pytest.raises(ConfigError, match="data.std=None"):
        NpzDataModule(str(tmp_path / "ok.npz"), mean=[0.1])


def test_damaged_idx_files(tmp_path):
    (tmp_path / "cut.gz").write_bytes(
        gzip.compress(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + bytes(10))[:-6]
    )
    with pytest.raises(DataFormatError, match="cut.gz: damaged gzip file"):
        read_idx(tmp_path / "cut.gz")
    (tmp_path / "short").write_bytes(bytes([0, 0, 8, 1]) + (10).to_bytes(4, "big") + bytes(4))
    with pytest.raises(DataFormatError, match="short: header says shape \\(10,\\) but holds 4 bytes"):
        read_idx(tmp_path / "short")


def test_data_errors_are_user_errors(capsys):
    assert DataFormatError in USER_ERRORS and issubclass(DataFormatError, ValueError)

    def work(_cfg):
        raise DataFormatError("npz: f.npz: x_train must be uint8")

    with pytest.raises(SystemExit) as exited:
        run_or_exit(work, OmegaConf.create({}))
    assert exited.value.code == 2 and capsys.readouterr().err == "error: npz: f.npz: x_train must be uint8\n"


# ---------------------------------------------------------------- 3. output folders


def test_require_writable_dir(tmp_path):
    assert require_writable_dir(tmp_path / "a" / "b", "output_dir").is_dir()
    assert not [p for p in (tmp_path / "a" / "b").iterdir()]  # the write probe is removed
    with pytest.raises(
        ConfigError, match=r"^paths.output_dir='/proc/forbidden' is invalid: .*writable folder"
    ):
        require_writable_dir("/proc/forbidden", "paths.output_dir")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is an existing file; choose another output_dir="):
        require_writable_dir(tmp_path / "file", "output_dir")
    with pytest.raises(ConfigError, match="cannot be created or written"):
        require_writable_dir(tmp_path / "file" / "sub", "output_dir")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only folders")
def test_require_writable_dir_read_only_folder(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    try:
        with pytest.raises(ConfigError, match="Permission denied"):
            require_writable_dir(locked / "out", "output_dir")
        with pytest.raises(ConfigError, match="Permission denied"):
            require_writable_dir(locked, "output_dir")
    finally:
        locked.chmod(0o755)


def test_certify_and_soft_labels_check_the_output_folder_before_loading(tmp_path):
    from rs_lightning.cli.certify import certify
    from rs_lightning.cli.soft_labels import soft_labels

    missing = (
        tmp_path / "missing.ckpt"
    )  # loading it would raise CheckpointError: the folder check comes first
    cfg = compose_config("certify", [f"checkpoint={missing}", "output_dir=/proc/forbidden", "device=cpu"])
    with pytest.raises(ConfigError, match="^output_dir='/proc/forbidden'"):
        certify(cfg)
    (tmp_path / "file").write_text("x")
    cfg = compose_config(
        "soft_labels", [f"checkpoint={missing}", f"output={tmp_path}/file/p.npy", "device=cpu"]
    )
    with pytest.raises(ConfigError, match=f"^output='{tmp_path}/file/p.npy' is invalid"):
        soft_labels(cfg)


# ---------------------------------------------------------------- 4. GPU trainers without GPUs


def test_gpu_trainer_without_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for name in ("ddp", "gpu"):
        trainer = compose_config("train", [f"trainer={name}"]).trainer
        with pytest.raises(ConfigError, match="trainer=ddp_sim .* or trainer=cpu") as err:
            check_trainer_config(trainer)
        assert str(err.value).startswith("trainer.accelerator='gpu' is invalid")
    for name in ("default", "cpu", "ddp_sim"):
        check_trainer_config(compose_config("train", [f"trainer={name}"]).trainer)


def test_gpu_trainer_with_too_few_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for devices in (-1, "auto", 1, "1", [0], "0,"):
        check_trainer_config(OmegaConf.create({"accelerator": "gpu", "devices": devices}))
    for devices in (2, "2", [0, 1], "1,"):
        with pytest.raises(ConfigError, match=r"^trainer.devices=.* must be at most 1 .*trainer=ddp_sim"):
            check_trainer_config(OmegaConf.create({"accelerator": "cuda", "devices": devices}))


# ---------------------------------------------------------------- 5. checkpoints to resume training from


class Payload:
    """A pickled object: loading it would run code from the file."""

    def __reduce__(self):
        return (print, ("this must never run",))


def _training_checkpoint(**extra) -> dict:
    return {
        "state_dict": {"model.w": torch.zeros(2)},
        "optimizer_states": [{"state": {}, "param_groups": []}],
        "loops": {"fit_loop": {}},
        "epoch": 3,
        CHECKPOINT_KEY: {
            "format": 1,
            "model": {"_target_": "rs_lightning.models.LeNet"},
            "input_shape": [1, 28, 28],
            "num_classes": 10,
            "sigma": 0.25,
        },
        **extra,
    }


def test_resume_checkpoint_is_loaded_safely_and_checked(tmp_path, capsys):
    good = tmp_path / "last.ckpt"
    torch.save(_training_checkpoint(), good)
    assert check_training_checkpoint(good)["epoch"] == 3
    assert check_training_checkpoint(good, expect={"model": {"_target_": "rs_lightning.models.LeNet"}})
    with pytest.raises(
        CheckpointError, match="was trained with model=.*LeNet.*resume with the checkpoint's model"
    ):
        check_training_checkpoint(good, expect={"model": {"_target_": "rs_lightning.models.MLP"}})
    for special in ("last", "best", "hpc", "registry:x"):  # names train.py resolves first: never unchecked
        with pytest.raises(CheckpointError, match=f"ckpt_path='{special}' does not exist"):
            check_training_checkpoint(special)

    with pytest.raises(CheckpointError, match=r"^ckpt_path='.*nope.ckpt' does not exist; pass the last.ckpt"):
        check_training_checkpoint(tmp_path / "nope.ckpt")
    torch.save({"state_dict": {}}, tmp_path / "foreign.ckpt")
    with pytest.raises(CheckpointError, match="not a training checkpoint of rs-lightning"):
        check_training_checkpoint(tmp_path / "foreign.ckpt")
    weights_only = _training_checkpoint()
    del weights_only["optimizer_states"]
    torch.save(weights_only, tmp_path / "weights.ckpt")
    with pytest.raises(
        CheckpointError, match="no optimizer or loop state \\(no optimizer_states: a weights-only save"
    ):
        check_training_checkpoint(tmp_path / "weights.ckpt")
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointError, match="is not a readable checkpoint"):
        check_training_checkpoint(tmp_path / "notes.txt")
    # a newer format, or unusable metadata, is refused before training resumes (it was read unchecked)
    newer = _training_checkpoint()
    newer[CHECKPOINT_KEY]["format"] = 99
    torch.save(newer, tmp_path / "newer.ckpt")
    with pytest.raises(CheckpointError, match=r"newer.ckpt'.* has metadata format=99, which this"):
        check_training_checkpoint(tmp_path / "newer.ckpt")
    torch.save(_training_checkpoint(**{CHECKPOINT_KEY: ["x"]}), tmp_path / "list.ckpt")
    with pytest.raises(CheckpointError, match="'rs_lightning' is a list, not a mapping"):
        check_training_checkpoint(tmp_path / "list.ckpt")

    torch.save(_training_checkpoint(evil=Payload()), tmp_path / "evil.ckpt")
    with pytest.raises(
        CheckpointError, match=r"would have to build print\); weights_only=True refuses"
    ) as err:
        check_training_checkpoint(tmp_path / "evil.ckpt")
    assert "\n" not in str(err.value)
    assert "must never run" not in capsys.readouterr().out


@pytest.mark.parametrize("sigma", ["nan", "inf"])
def test_train_refuses_non_finite_sigma_before_any_work(tmp_path, sigma):
    """Catches: sigma=nan / inf passing a bare `> 0` check (exit 0 with NaN weights)."""
    from rs_testing import train_config

    from rs_lightning.cli.train import train

    with pytest.raises(ConfigError, match=rf"^sigma={sigma} is invalid: sigma must be a finite number > 0"):
        train(train_config(tmp_path, [f"sigma={sigma}"]))
    assert not (tmp_path / "checkpoints").exists()


def test_train_wires_the_output_trainer_and_checkpoint_checks(tmp_path, monkeypatch):
    """train.py calls the shared checks before any work: a GPU trainer without GPUs, an output folder
    that is a file, a resume file that is not a training checkpoint."""
    from rs_testing import train_config

    from rs_lightning.cli.train import train

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="ddp_sim"):
        train(train_config(tmp_path / "a", ["trainer=ddp"]))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"^paths.output_dir=.*existing file"):
        train(train_config(tmp_path / "file"))
    torch.save({"weights": torch.zeros(1)}, tmp_path / "foreign.ckpt")
    with pytest.raises(CheckpointError, match=r"^ckpt_path=.*not a training checkpoint"):
        train(train_config(tmp_path / "b", [f"ckpt_path={tmp_path / 'foreign.ckpt'}"]))


# ---------------------------------------------------------------- 6. labels and sizes, before allocating


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (  # a test label beyond every training label: the model would get 1,000,001 outputs
            lambda a: {**a, "y_test": np.array([0, 1, 2, 10**6])},
            ["y_test has label 1000000", "y_train's labels go up to 2", "class_names"],
        ),
        (  # labels that leave almost all of 0..K-1 unused
            lambda a: {**a, "y_train": np.array([0, 1, 2, 10**6] * 3)},
            ["y_train has label 1000000 (1000001 classes)", "only 4 distinct labels", "numpy.unique"],
        ),
    ],
)
def test_npz_labels_the_data_cannot_have_are_refused(tmp_path, change, needles):
    """Catches: an npz whose test labels reach 10**6 trained a 1,000,001-class model silently (2 GB
    checkpoints for a few images): the class count came from the largest label of either split."""
    path = tmp_path / "labels.npz"
    np.savez(path, **change(_arrays()))
    with pytest.raises(DataFormatError) as err:
        NpzDataModule(str(path)).setup()
    message = str(err.value)
    assert str(path) in message and "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_npz_subsets_of_many_classes_stay_legitimate(tmp_path):
    """A small subset of a 1000-class set has fewer images than classes, and with names a class may lack
    training images: neither is refused."""
    rng = np.random.default_rng(0)
    arrays = {**_arrays(), "y_train": rng.choice(1000, 12, replace=False), "y_test": np.array([5, 7, 9, 11])}
    arrays["y_train"][0] = 999
    np.savez(tmp_path / "subset.npz", **arrays)
    module = NpzDataModule(str(tmp_path / "subset.npz"))
    module.setup()
    assert module.num_classes == 1000
    names = np.array([f"c{i}" for i in range(5)])
    np.savez(tmp_path / "named.npz", **_arrays(), class_names=names)
    module = NpzDataModule(str(tmp_path / "named.npz"))
    module.setup()
    assert module.num_classes == 5


def test_every_array_backed_data_module_checks_its_labels():
    """Catches: the label range was checked only by the npz module; any module holding ArrayDataset splits
    now has its labels checked against num_classes when it is set up."""
    from rs_lightning.data.arrays import ArrayDataset
    from rs_lightning.data.base import RSDataModule

    class Tiny(RSDataModule):
        name, num_classes, input_shape = "tiny", 10, (1, 2, 2)

        def _load(self):
            images = torch.zeros((3, 1, 2, 2), dtype=torch.uint8)
            return {
                "train": ArrayDataset(images, torch.tensor([0, 1, 2])),
                "test": ArrayDataset(images, [0, 10, 1]),
            }

    with pytest.raises(
        DataFormatError, match=r"^tiny: the test split has label 10, but the data has 10 classes"
    ):
        Tiny().setup()


def test_train_cli_refuses_npz_labels_beyond_the_training_labels(tmp_path):
    """Catches: the 1,000,001-class model trained from 64 images, and Lightning's "Seed set" line on stderr
    before any error raised after seeding (two lines)."""
    path = tmp_path / "labels.npz"
    np.savez(path, **{**_arrays(), "y_test": np.array([0, 1, 2, 10**6])})
    done = run("train.py", "data=npz", f"data.path={path}", f"hydra.run.dir={tmp_path / 'run'}")
    assert_one_line_error(done, str(path), "y_test has label 1000000")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_train_refuses_a_model_too_large_for_memory_before_building_it(tmp_path):
    """Catches: ``model=mlp model.hidden=100000000000`` built the network for real (an allocation traceback,
    exit 1); a build on the meta device now estimates its training state against the memory available."""
    done = run("train.py", "model=mlp", "model.hidden=100000000000", f"hydra.run.dir={tmp_path}")
    line = assert_one_line_error(
        done, "model={'_target_': 'rs_lightning.models.digits.MLP', 'hidden': 100000000000}"
    )
    assert "available on cpu" in line and "7,500,000,000,010 parameters" in line and "GiB" in line
    assert not (tmp_path / "checkpoints").exists()


def test_the_size_estimate_counts_weights_gradients_and_optimizer_state(monkeypatch):
    """The refusal's arithmetic: weights x TRAINING_FACTOR against the memory available, built on the meta
    device (nothing allocated), and no refusal where the memory is unknown."""
    from rs_lightning.models import MLP, size

    def build():
        return MLP(input_shape=(1, 8, 8), num_classes=10, hidden=[256])

    weights = (64 * 256 + 256 + 256 * 10 + 10) * 4
    assert size.state_bytes(size.meta_build(build)) == weights
    assert next(size.meta_build(build).parameters()).is_meta
    monkeypatch.setattr(size, "available_memory", lambda device: weights * size.TRAINING_FACTOR)
    size.require_trainable_size(build, "model", {}, torch.device("cpu"))  # fits exactly
    monkeypatch.setattr(size, "available_memory", lambda device: weights * size.TRAINING_FACTOR - 1)
    with pytest.raises(ConfigError, match=r"^model=\{\} is invalid: .*fits in the .* available on cpu"):
        size.require_trainable_size(build, "model", {}, torch.device("cpu"))
    size.require_trainable_size(build, "model", {}, None)  # a fork strategy on CUDA: not asked
    monkeypatch.setattr(size, "available_memory", lambda device: None)
    size.require_trainable_size(build, "model", {}, torch.device("cpu"))


# ---------------------------------------------------------------- 7. messages that blamed the wrong thing


def _report_runs() -> list[str]:
    return [str(p) for p in sorted((REPO / "docs" / "results" / "mnist_structured" / "runs").iterdir())[:2]]


def test_report_out_that_is_a_file_does_not_suggest_overwrite(tmp_path, capsys):
    """Catches: ``--out <an existing file>`` suggested --overwrite, which cannot help: it replaces report
    files in a folder, and a file is not a folder."""
    from rs_lightning.cli.report import main as report_main

    (tmp_path / "notes.txt").write_text("x")
    assert report_main([*_report_runs(), "--out", str(tmp_path / "notes.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an existing file, not a folder" in err and "--overwrite" not in err
    assert (tmp_path / "notes.txt").read_text() == "x"


@pytest.mark.parametrize("radius", ["nan", "-0.5"])
def test_a_nan_or_negative_radius_is_a_corrupt_row_not_mixed_protocols(tmp_path, capsys, radius):
    """Catches: a NaN or negative radius in certify.tsv was blamed on "rows of two protocols mixed in it";
    certify.py writes neither, so the row is corrupt or edited."""
    import shutil

    from rs_lightning.cli.report import main as report_main

    run_dir = tmp_path / "run"
    shutil.copytree(_report_runs()[0], run_dir)
    lines = (run_dir / "certify.tsv").read_text().splitlines()
    column = lines[0].split("\t").index("radius")
    fields = lines[2].split("\t")
    fields[column] = radius
    lines[2] = "\t".join(fields)
    (run_dir / "certify.tsv").write_text("\n".join(lines) + "\n")
    assert report_main([str(run_dir), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"certify.tsv:3 holds radius={float(radius)}" in err
    assert "corrupt or edited row" in err and "protocol" not in err


@pytest.mark.parametrize(
    ("script", "overrides", "needles"),
    [
        ("train.py", ["nosuchkey=1"], ["Key 'nosuchkey' is not in struct", "use +nosuchkey=1"]),
        (
            "train.py",
            ["method=nope"],
            ["Could not find 'method/nope'", "Available options in 'method': acr_gaming,"],
        ),
        ("train.py", ["sigma=[1"], ["sigma=[1: ", "override_grammar"]),
        ("certify.py", ["checkpoint=x.ckpt", "data=nope"], ["Could not find 'data/nope'"]),
        ("soft_labels.py", ["checkpoint=x.ckpt", "nosuch=1"], ["use +nosuch=1"]),
    ],
)
def test_hydra_composition_errors_are_one_line(tmp_path, script, overrides, needles):
    """Catches: Hydra's own errors (an unknown key, a missing config group option, bad override syntax)
    exited 1 with Hydra's multi-line message, while every other bad value gives one ``error:`` line and 2."""
    done = run(script, *overrides, f"hydra.run.dir={tmp_path}")
    assert_one_line_error(done, *needles)


def test_hydra_errors_of_a_sweep_are_found_and_good_sweeps_pass(capsys):
    """A ``-m`` sweep is composed job by job (every swept config group option once): a bad option in the
    second place of a sweep is reported in one line, and the sweeps and flags that work still work."""
    from rs_lightning.cli.common import exit_if_config_invalid, sweep_jobs

    conf = REPO / "conf"
    for good in (
        ["-m", "hydra/launcher=joblib", "sigma=0.25,0.5", "seed=range(0,50)", "~callbacks.certification"],
        ["-m", "method=gaussian,macer", "experiment=cohen_mnist_sigma025"],
        ["experiment=cohen_mnist_sigma025"],
        ["--cfg", "job"],
        ["--help"],
        ["-m", "sigma=interval(0,1)"],
    ):
        exit_if_config_invalid(good, conf, "train")
    assert capsys.readouterr().err == ""
    with pytest.raises(SystemExit) as exited:
        exit_if_config_invalid(["-m", "sigma=0.25,0.5", "method=gaussian,nope"], conf, "train")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: In 'train': Could not find 'method/nope'")
    jobs = sweep_jobs(["method=gaussian,macer,catrs", "sigma=0.25,0.5", "data.path='a b'"], conf)
    assert jobs == [
        ["method=gaussian", "sigma=0.25", "data.path='a b'"],
        ["method=macer", "sigma=0.25", "data.path='a b'"],
        ["method=catrs", "sigma=0.25", "data.path='a b'"],
    ]
