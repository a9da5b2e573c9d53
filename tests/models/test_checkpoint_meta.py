"""CheckpointMeta: the one stored form of a checkpoint's metadata and its reading, older versions included."""

import pytest

from rs_lightning.models.checkpoint import (
    CHECKPOINT_FORMAT,
    CHECKPOINT_KEY,
    CheckpointError,
    CheckpointMeta,
)

STORED = {
    "format": 1,
    "rs_lightning_version": "0.1.0",
    "model": {"_target_": "rs_lightning.models.digits.DigitsCNN"},
    "data": {"_target_": "rs_lightning.data.digits.DigitsDataModule"},
    "method": {"_target_": "rs_lightning.methods.macer.MACER"},
    "optim": {"max_epochs": 2},
    "input_shape": [1, 8, 8],
    "num_classes": 10,
    "class_names": [str(c) for c in range(10)],
    "mean": None,
    "std": None,
    "seed": 0,
    "sigma": 0.25,
    "noise": "laplace",
}


def test_the_stored_form_round_trips_in_trainpy_order():
    meta = CheckpointMeta.from_dict(STORED)
    assert meta.to_dict() == STORED and list(meta.to_dict()) == list(STORED)
    assert meta.training_method == "MACER" and CHECKPOINT_FORMAT == 2 and STORED["format"] == 1
    assert CheckpointMeta.read({CHECKPOINT_KEY: STORED}, "x.ckpt") == meta
    pipeline = {"mode": "ars", "first_query_budget_frac": 0.5, "mask_width": 32}
    assert CheckpointMeta(pipeline=pipeline, wandb_run_id="ab12cd34").to_dict()["pipeline"] == pipeline
    assert "pipeline" not in meta.to_dict() and "wandb_run_id" not in meta.to_dict()
    denoiser = {"model": {"_target_": "rs_lightning.models.denoisers.DnCNN"}, "sigma": 0.25}
    assert CheckpointMeta(denoiser=denoiser).to_dict()["format"] == 2  # older versions refuse it
    assert "denoiser" not in meta.to_dict()


def test_older_metadata_loads():
    """Format 1 without ``noise`` (trained before noises existed) and untagged metadata are Gaussian."""
    older = {k: v for k, v in STORED.items() if k not in ("noise", "format")}
    for stored in (older, {**older, "format": 1}):
        assert CheckpointMeta.read({CHECKPOINT_KEY: stored}, "x.ckpt").noise == "gaussian"
    assert CheckpointMeta.from_dict({"model": STORED["model"], "unknown": 1}).model == STORED["model"]


@pytest.mark.parametrize("version", [3, -1, "1", True])
def test_an_unknown_format_is_refused_in_one_line(version):
    needle = rf"x.ckpt has metadata format={version!r}, .* update rs-lightning"
    with pytest.raises(CheckpointError, match=needle) as raised:
        CheckpointMeta.read({CHECKPOINT_KEY: {**STORED, "format": version}}, "x.ckpt")
    assert len(str(raised.value).splitlines()) == 1
