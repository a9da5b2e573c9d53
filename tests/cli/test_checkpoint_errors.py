"""A checkpoint is never trusted: wrong files, foreign objects and misfitting weights give clear errors."""

import pytest
import torch

from rs_lightning.models.checkpoint import CheckpointError, load_classifier, safe_instantiate


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


@pytest.mark.parametrize("target", ["os.system", "builtins.eval", "rs_lightning_evil.models.X"])
def test_targets_outside_the_package_are_refused(trained_digits, tmp_path, target):
    path = _tampered(trained_digits, tmp_path, lambda c: c["rs_lightning"]["model"].update(_target_=target))
    with pytest.raises(CheckpointError, match="refusing to build"):
        load_classifier(path)
    with pytest.raises(CheckpointError, match="nested"):
        safe_instantiate(
            {"_target_": "rs_lightning.models.LeNet", "x": {"_target_": "os.system"}},
            ("rs_lightning.models.",),
        )


def test_a_good_checkpoint_loads_in_eval_mode_with_normalization(trained_digits):
    model, meta = load_classifier(trained_digits["checkpoint"])
    assert not model.training and meta["sigma"] == 0.25
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
    meta = {"data": {"_target_": "rs_lightning.data.npz.NpzDataModule", "path": str(path)}, "num_classes": 3}
    datamodule = checkpoint_datamodule(OmegaConf.create({"data": None}), meta)
    assert datamodule.num_classes == 3 and len(datamodule.dataset("test")) == 3
    with pytest.raises(ConfigError, match="4 classes"):
        checkpoint_datamodule(OmegaConf.create({"data": None}), {**meta, "num_classes": 4})
    # an (N, 1, 8, 8) dataset for a (1, 4, 4) network fails here, not deep inside a convolution
    shapes = r"a dataset of \(1, 8, 8\) inputs like the checkpoint's, not \(1, 4, 4\)"
    with pytest.raises(ConfigError, match=shapes):
        checkpoint_datamodule(OmegaConf.create({"data": None}), {**meta, "input_shape": [1, 8, 8]})
