"""The shared LightningModule: chunked steps, LR schedule timing, per-sample indices, noise copies."""

import functools

import lightning.pytorch as pl
import pandas as pd
import pytest
import torch
from rs_testing import train_config

from rs_lightning.attacks import noise_copies
from rs_lightning.cli.train import train
from rs_lightning.data import DigitsDataModule
from rs_lightning.methods import GaussianAugmentation
from rs_lightning.models import DigitsCNN, build_classifier


class Recording(GaussianAugmentation):
    needs_sample_index = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = []

    def training_loss(self, x, y, index=None):
        self.seen.append((len(x), index.clone()))
        return super().training_loss(x, y)


def _method(num_chunks: int) -> Recording:
    net = DigitsCNN(input_shape=(1, 8, 8), num_classes=10)
    return Recording(
        build_classifier(net, None, None),
        sigma=0.25,
        num_chunks=num_chunks,
        optimizer=functools.partial(torch.optim.SGD, lr=0.01),
    )


@pytest.mark.parametrize(("num_chunks", "chunk"), [(1, 50), (4, 12)])
def test_each_chunk_is_one_optimizer_step_and_the_remainder_is_dropped(num_chunks, chunk):
    data = DigitsDataModule(batch_size=50)
    data.train_with_index = True
    method = _method(num_chunks)
    trainer = pl.Trainer(
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(method, datamodule=data)
    assert trainer.global_step == 3 * num_chunks
    assert [size for size, _ in method.seen] == [chunk] * (3 * num_chunks)
    indices = torch.cat([index for _, index in method.seen])
    assert len(set(indices.tolist())) == len(indices)  # distinct dataset indices, none repeated


def test_lr_schedule_steps_after_each_epoch(tmp_path):
    """StepLR(step_size=1, x0.1): epoch 0 at lr, epoch 1 at lr/10 (Cohen's train.py timing)."""
    train(
        train_config(
            tmp_path,
            [
                "optim.max_epochs=3",
                "optim.scheduler.step_size=1",
                "optim.optimizer.lr=0.05",
                "~callbacks.certification",
            ],
        )
    )
    lr = pd.read_csv(tmp_path / "csv" / "metrics.csv")["lr-SGD"].dropna().tolist()
    assert lr == pytest.approx([0.05, 0.005, 0.0005])


def test_noisy_copies_are_image_major_and_scaled_by_sigma():
    method = _method(1)
    x = torch.arange(3.0).view(3, 1, 1, 1).expand(3, 1, 8, 8)
    repeated, noise = method.noisy_copies(x, 4)
    assert repeated[:, 0, 0, 0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert noise.std().item() == pytest.approx(0.25, rel=0.05)
    per_copy = noise_copies(noise, 4)  # (m, B, ...): copy j of image b is row b*m + j
    assert torch.equal(per_copy[2, 1], noise[1 * 4 + 2])


def test_warmup_factor():
    method = _method(1)
    method.trainer = type("T", (), {"current_epoch": 0})()
    assert method.warmup(10) == pytest.approx(0.1) and method.warmup(1) == 1.0
