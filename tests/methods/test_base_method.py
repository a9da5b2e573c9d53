"""The shared LightningModule: chunked steps, LR schedule timing, per-sample indices, noise copies."""

import functools

import lightning.pytorch as pl
import pandas as pd
import pytest
import torch
from rs_testing import train_config

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


def _method(num_chunks: int, noise_seed: int = 0) -> Recording:
    net = DigitsCNN(input_shape=(1, 8, 8), num_classes=10)
    return Recording(
        build_classifier(net, None, None),
        sigma=0.25,
        num_chunks=num_chunks,
        optimizer=functools.partial(torch.optim.SGD, lr=0.01),
        noise_seed=noise_seed,
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


def test_noisy_logits_are_copy_major_scaled_by_sigma_and_reproducible_per_seed():
    """The one copy layout: noise (m, B, ...) with noise[j, b] = draw j of image b, logits (m, B, K) with
    logits[j, b] = f(x[b] + noise[j, b]), all m·B copies in one forward pass (row j·B + b)."""
    m, b = 16, 3
    method = _method(1)
    x = torch.rand(b, 1, 8, 8, generator=torch.Generator().manual_seed(0))
    batches = []
    method.model.register_forward_pre_hook(lambda module, args: batches.append(args[0].detach().clone()))
    logits, noise = method.noisy_logits(x, m)
    assert noise.shape == (m, b, 1, 8, 8) and logits.shape == (m, b, 10)
    assert len(batches) == 1 and batches[0].shape == (m * b, 1, 8, 8)
    with torch.no_grad():
        for j in range(m):
            for i in range(b):
                assert torch.equal(batches[0][j * b + i], x[i] + noise[j, i])
                torch.testing.assert_close(logits[j, i], method.model((x[i] + noise[j, i])[None])[0])
    assert noise.mean().abs().item() < 0.02 and noise.std().item() == pytest.approx(0.25, rel=0.03)
    assert not torch.equal(noise[0], noise[1]), "every copy has its own draw"

    same, other = _method(1), _method(1, noise_seed=1)
    assert torch.equal(same.draw_noise(x, m), noise), "the same noise_seed gives the same draws"
    assert not torch.equal(other.draw_noise(x, m), noise)
    fresh = _method(1)
    expected = 0.25 * torch.randn((m, b, 1, 8, 8), generator=fresh.noise_generator)
    assert torch.equal(noise, expected), "copy-major draw order from the rank's training-noise stream"

    x_other, calls = x.flip(0), len(batches)  # given draws are reused as they are, on another base point
    again, reused = method.noisy_logits(x_other, noise=noise)
    assert reused is noise and len(batches) == calls + 1
    assert torch.equal(batches[-1], (x_other.unsqueeze(0) + noise).flatten(0, 1))
    torch.testing.assert_close(again[2, 1], method.model(x_other[1:2] + noise[2, 1:2])[0])


def test_warmup_factor():
    method = _method(1)
    method.trainer = type("T", (), {"current_epoch": 0})()
    assert method.warmup(10) == pytest.approx(0.1) and method.warmup(1) == 1.0
