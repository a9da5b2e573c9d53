"""The LightningModule every training method shares.

It owns the base classifier (normalization included), sigma, optimizer and scheduler from config, noisy
validation accuracy, the logged names (``train/loss``, ``val/acc_noisy``, ``val/loss``), per-rank noise
seeding and the checkpoint metadata that ``certify.py`` needs. A method overrides :meth:`training_loss` and
gets its m noisy copies per image from :meth:`noisy_logits` / :meth:`draw_noise`, in the one copy-major layout
``(m, B, ...)`` of :mod:`rs_lightning.smoothing.soft`.

**Step semantics.** Optimization is manual: each loader batch of B images is split into ``num_chunks``
chunks of ⌊B / num_chunks⌋ images (the remainder is dropped, as in SmoothAdv's ``train_pgd.py``), and every
chunk is one optimizer step. ``num_chunks = 1`` (Gaussian, MACER) is one step per loader batch;
SmoothAdv's multi-noise training, Consistency, SmoothMix and CAT-RS set it to their number of noise draws
m, so one step sees B/m distinct images × m noises (as their reference training scripts do).

**LR schedule timing.** The scheduler steps once per epoch, shifted by ``scheduler_epoch_offset`` so that
a recipe's LR drops land where its reference's do (:mod:`rs_lightning.methods.schedule`); :attr:`lr_dropped`
says whether the LR in effect is below the initial one (MACER's deferral keys on it).

**Faults.** A non-finite loss stops training with :class:`NonFiniteLossError` (epoch, step, method, last
finite loss) before the optimizer step, or with ``on_nonfinite_loss="skip"`` skips that step (also when a
gradient is non-finite) and counts it (``train/skipped_steps``), warning each epoch with the share skipped
and stopping when an epoch skips more than ``on_nonfinite_loss_max_share`` of its steps; non-finite
validation logits stop the run under either policy. A checkpoint is never written from non-finite weights,
nor from an epoch that stopped the run. **Resume.** Checkpoints carry the training-noise generator and the
global RNG states (Python, NumPy, torch CPU and CUDA, which drive data order and augmentation); the noise
state is applied when the generator is created on the module's device, i.e. after Lightning moved the
module there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from torchmetrics import MeanMetric

from rs_lightning.models.checkpoint import CHECKPOINT_KEY, CheckpointMeta
from rs_lightning.models.resume import check_resumable
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.noises import noise_of
from rs_lightning.smoothing.soft import noisy_logits
from rs_lightning.validation import ConfigError, require_at_least, require_positive, require_share

from . import schedule
from .faults import (
    NONFINITE_POLICIES,
    NonFiniteLossError,
    check_skipped_share,
    global_rng_states,
    gradients_finite,
    require_finite_weights,
    set_global_rng_states,
)


def check_training_noise(method: type, noise: str, settings: Mapping | None = None) -> None:
    """ConfigError unless ``noise`` is a known noise that ``method`` (a :class:`SmoothingMethod` class) trains
    with (:attr:`SmoothingMethod.noises`), with its ``settings`` (the ``method.*`` keys:
    :meth:`SmoothingMethod.check_noise_settings`)."""
    Certificate(noise)  # an unknown noise: one line naming the known ones
    if noise not in method.noises:
        raise ConfigError(
            "noise",
            noise,
            " or ".join(method.noises) + f" for method {method.__name__}",
            "its loss, attack or accounting assumes Gaussian noise; train another noise with method=gaussian "
            "or method=consistency",
        )
    method.check_noise_settings(noise, settings or {})


class SmoothingMethod(pl.LightningModule):
    """Base of all training methods.

    Args:
        model: base classifier f (its first layer is the normalization); maps [0,1] inputs to logits.
        sigma: noise level in [0,1]-pixel units (the noise's per-coordinate standard deviation); the noise is
            added before normalization, never clipped.
        noise: the training noise, ``gaussian`` or another one the method allows (:attr:`noises`; Laplace
            and uniform at standard deviation ``sigma``, :mod:`rs_lightning.smoothing.certificate`).
        optimizer: ``params -> Optimizer`` (a Hydra ``_partial_``).
        scheduler: optional ``optimizer -> LRScheduler``, stepped once per epoch.
        noise_seed: base seed of the training-noise generator; rank r uses ``(noise_seed, r)``.
        metadata: what certification needs (model/data config, normalization, classes), saved with sigma
            and the noise in every checkpoint under ``"rs_lightning"`` (:meth:`checkpoint_meta`).
        num_chunks: optimizer steps per loader batch (see the module docstring).
        on_nonfinite_loss: ``"stop"`` (raise :class:`NonFiniteLossError`) or ``"skip"`` (drop the step and
            count it) when a loss, or under ``"skip"`` a gradient, is NaN or infinite.
        on_nonfinite_loss_max_share: under ``"skip"``, the share of an epoch's steps that may be skipped; an
            epoch that skips more stops the run (:class:`NonFiniteLossError`), since such a run is dead.
        scheduler_epoch_offset: k, epochs by which the scheduler runs behind modern per-epoch stepping (see
            the module docstring; ``optim.scheduler_epoch_offset``).
    """

    noises: tuple[str, ...] = ("gaussian",)
    """The noises this method trains with: Gaussian only unless its loss does not assume the Gaussian form
    (a radius term, an attack or an accounting tied to it)."""

    @classmethod
    def check_noise_settings(cls, noise: str, settings: Mapping) -> None:
        """ConfigError for a ``method.*`` setting that does not go with the training ``noise`` (checked by
        train.py before any work and again when the method is built); none by default."""

    needs_sample_index: bool = False
    """Set by methods that keep per-sample state: training batches then carry dataset indices."""

    def __init__(
        self,
        model: nn.Module,
        sigma: float,
        optimizer: Callable[..., torch.optim.Optimizer],
        scheduler: Callable[..., Any] | None = None,
        noise_seed: int = 0,
        metadata: CheckpointMeta | None = None,
        num_chunks: int = 1,
        on_nonfinite_loss: str = "stop",
        scheduler_epoch_offset: int = 0,
        on_nonfinite_loss_max_share: float = 0.1,
        noise: str = "gaussian",
    ) -> None:
        super().__init__()
        check_training_noise(type(self), noise)
        self.noise = str(noise)
        self.scheduler_epoch_offset = schedule.epoch_offset(scheduler_epoch_offset)
        require_positive("sigma", sigma)
        require_at_least("num_chunks", num_chunks, 1)
        if on_nonfinite_loss not in NONFINITE_POLICIES:
            raise ConfigError("on_nonfinite_loss", on_nonfinite_loss, " or ".join(NONFINITE_POLICIES))
        require_share("on_nonfinite_loss_max_share", on_nonfinite_loss_max_share)
        self.on_nonfinite_loss = on_nonfinite_loss
        self.max_skipped_share = float(on_nonfinite_loss_max_share)
        self.skipped_steps = 0
        self._epoch_steps = self._epoch_skipped = 0  # optimizer steps tried and skipped in this epoch
        self._val_nonfinite = 0  # validation inputs with non-finite logits in this validation epoch
        self._last_finite_loss: torch.Tensor | None = None  # kept on the device: read only for a message
        self.automatic_optimization = False
        self.num_chunks = int(num_chunks)
        self.model = model
        self.sigma = float(sigma)
        self.optimizer_factory = optimizer
        self.scheduler_factory = scheduler
        self.noise_seed = int(noise_seed)
        self.metadata = metadata
        self.val_acc_noisy = MeanMetric()
        self.val_loss = MeanMetric()
        self._train_generator: torch.Generator | None = None
        self._val_generator: torch.Generator | None = None
        self._restored_noise_state: torch.Tensor | None = None

    # ----------------------------------------------------------------- noise
    def _generator(self, stream: int) -> torch.Generator:
        seed = np.random.SeedSequence([self.noise_seed, self.global_rank, stream]).generate_state(1)[0]
        return torch.Generator(device=self.device).manual_seed(int(seed))

    @property
    def noise_generator(self) -> torch.Generator:
        """Training-noise generator of this rank (created on the module's device, restored on resume)."""
        if self._train_generator is None or self._train_generator.device != self.device:
            self._train_generator = self._generator(0)
            if self._restored_noise_state is not None:  # resume: the state saved on this device type
                try:
                    self._train_generator.set_state(self._restored_noise_state)
                except RuntimeError:  # saved by another device type's generator (CPU vs CUDA)
                    rank_zero_warn(
                        "the checkpoint's training-noise state comes from another device type than "
                        f"{self.device.type}: the noise continues from a fresh stream seeded by (seed, rank, "
                        f"epoch {self.current_epoch}), so this resume is not bit-identical to an "
                        "uninterrupted run"
                    )
                    self._train_generator = self._generator(1000 + self.current_epoch)
                self._restored_noise_state = None
        return self._train_generator

    def training_noise(self, like: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The training noise shaped like ``like``: ``sigma * N(0, I)``, λ times standard Laplace/uniform
        noise with λ giving standard deviation ``sigma``, or lattice offsets j/255: the noise certification
        draws (:meth:`~rs_lightning.smoothing.noises.Noise.scaled`)."""
        gen = generator or self.noise_generator
        noise = noise_of(self.noise)
        return noise.scaled(like.shape, gen, like.device, like.dtype, self.sigma)

    def draw_noise(self, x: torch.Tensor, m: int) -> torch.Tensor:
        """m draws ``sigma * N(0, I)`` per image of ``x`` ``(B, ...)``, copy-major ``(m, B, ...)``:
        ``noise[j, b]`` is draw j of image b (:mod:`rs_lightning.smoothing.soft`), from the rank's
        training-noise generator in that order."""
        return self.training_noise(x.unsqueeze(0).expand(m, *x.shape))

    def noisy_logits(
        self, x: torch.Tensor, m: int | None = None, *, noise: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward pass over noisy copies that every method shares: ``(logits (m, B, K), noise
        (m, B, ...))`` with ``logits[j, b] = f(x[b] + noise[j, b])``, all m·B copies in one forward pass in
        the model's current mode, logits in float32 under bf16/fp16 autocast. ``noise`` defaults to
        ``draw_noise(x, m)``; pass it to reuse draws (e.g. those an attack saw) on another base point ``x``
        (e.g. the attacked x̂)."""
        if noise is None:
            noise = self.draw_noise(x, m)
        return noisy_logits(self.model, x, noise), noise

    def warmup(self, epochs: int) -> float:
        """Linear warm-up factor ``min(1, (e + 1) / epochs)`` at the current 0-based epoch ``e`` (SmoothAdv's
        and Consistency's epsilon, SmoothMix's eta and clean-side radius); 1 when ``epochs <= 1``."""
        return 1.0 if epochs <= 1 else min(1.0, (self.current_epoch + 1) / epochs)

    # ---------------------------------------------------------------- hooks
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def training_loss(
        self, x: torch.Tensor, y: torch.Tensor, index: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The method's loss on one chunk: clean inputs ``x`` in [0,1], labels ``y`` and, for methods with
        ``needs_sample_index``, the dataset ``index`` of each input."""
        raise NotImplementedError

    def chunks(self, batch) -> list[tuple[torch.Tensor, ...]]:
        """Split a loader batch into ``num_chunks`` chunks of ⌊B / num_chunks⌋ samples (remainder dropped)."""
        if self.num_chunks == 1:
            return [tuple(batch)]
        size = len(batch[0]) // self.num_chunks
        if size == 0:
            return []
        return [tuple(t[i * size : (i + 1) * size] for t in batch) for i in range(self.num_chunks)]

    def training_step(self, batch, batch_idx: int) -> torch.Tensor | None:
        optimizers = self.optimizers()
        optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
        losses = []
        for chunk in self.chunks(batch):
            self._epoch_steps += 1
            loss = self.training_loss(*chunk)
            self._zero_grad(optimizers)
            if not self._finite_or_skip(loss, optimizers):
                continue
            self.manual_backward(loss)
            if self.on_nonfinite_loss == "skip" and not gradients_finite(self):
                self._skip(optimizers)
                continue
            for optimizer in optimizers:
                optimizer.step()
            self.after_optimizer_step()
            losses.append(loss.detach())
        if self.on_nonfinite_loss == "skip":
            self.log("train/skipped_steps", float(self.skipped_steps), on_epoch=True, reduce_fx="max")
        if not losses:
            return None
        loss = torch.stack(losses).mean()
        self._last_finite_loss = loss
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=True, batch_size=len(batch[0]))
        return loss

    def after_optimizer_step(self) -> None:
        """Hook run after every optimizer step (e.g. a projection of parameters); nothing by default."""

    @staticmethod
    def _zero_grad(optimizers) -> None:
        for optimizer in optimizers:
            optimizer.zero_grad()

    def _finite_or_skip(self, loss: torch.Tensor, optimizers) -> bool:
        """True for a finite loss; else stop (raise) or count a skipped step (``on_nonfinite_loss``)."""
        if bool(torch.isfinite(loss.detach()).all()):
            return True
        if self.on_nonfinite_loss == "skip":
            self._skip(optimizers)
            return False
        last = "none yet" if self._last_finite_loss is None else f"{float(self._last_finite_loss):.6g}"
        raise NonFiniteLossError(
            f"training loss is {float(loss.detach().float().mean())} at epoch {self.current_epoch}, step "
            f"{self.global_step} (method {self._method_name}, sigma {self.sigma}); last finite loss {last}. "
            f"Nothing was saved from this state: {self._saved_state()}. Lower the learning rate "
            "(optim.optimizer.lr), or pass on_nonfinite_loss=skip to skip such steps"
        )

    @property
    def _method_name(self) -> str:
        return (self.metadata and self.metadata.training_method) or type(self).__name__

    def _saved_state(self) -> str:
        """What a stopped run leaves: the last checkpoint (written by this run or resumed from), or none."""
        callback = self.trainer.checkpoint_callback if self._trainer is not None else None
        last = getattr(callback, "last_model_path", "") or ""
        if last and Path(last).is_file():
            return f"the last checkpoint written is {last}"
        return "no checkpoint was written yet (the run failed in its first epoch); start it again"

    def _skip(self, optimizers) -> None:
        self._zero_grad(optimizers)
        self.skipped_steps += 1
        self._epoch_skipped += 1

    def _summed(self, *values: int) -> list[int]:
        """``values`` summed over the DDP ranks (every rank calls this at the same hook), so that all ranks
        take the same stop decision; as they are on one process."""
        if self._trainer is None or self.trainer.world_size == 1:
            return list(values)
        total = self.trainer.strategy.reduce(torch.tensor(values, device=self.device), reduce_op="sum")
        return [int(v) for v in total.tolist()]

    def _check_skipped_share(self) -> None:
        """``on_nonfinite_loss=skip``: warn with the epoch's skipped share; stop above the allowed share. Once
        per epoch: at its validation (which runs before the epoch ends), else at its end."""
        skipped, steps = self._summed(self._epoch_skipped, self._epoch_steps)
        self._epoch_steps = self._epoch_skipped = 0  # also counts saved mid-epoch (step checkpoints)
        if steps == 0:
            return
        where = f"epoch {self.current_epoch} (method {self._method_name}, sigma {self.sigma})"
        warning = check_skipped_share(skipped, steps, self.max_skipped_share, where, self._saved_state)
        if warning:
            rank_zero_warn(warning)

    def on_train_epoch_end(self) -> None:
        self._check_skipped_share()  # before the epoch's checkpoint (written after this hook)
        schedulers = self.lr_schedulers()
        if schedulers is not None:
            schedulers = schedulers if isinstance(schedulers, list) else [schedulers]
            schedule.step_after_epoch(schedulers, self.current_epoch, self.scheduler_epoch_offset)

    @property
    def lr_dropped(self) -> bool:
        """Whether the LR in effect is below its initial one (:func:`.schedule.lr_dropped`)."""
        return schedule.lr_dropped(self.trainer.optimizers[0])

    def on_validation_epoch_start(self) -> None:
        self._val_generator = self._generator(1)  # the same validation noise every epoch
        self._val_nonfinite = 0

    def on_validation_epoch_end(self) -> None:
        """Stop on non-finite validation logits: the weights are finite but the model is dead (e.g. weights
        of 1e20 after skipped steps), and its checkpoint would certify nothing."""
        if self.trainer.sanity_checking:
            return
        self._check_skipped_share()  # the likelier cause, named first
        (nonfinite,) = self._summed(self._val_nonfinite)
        if nonfinite:
            raise NonFiniteLossError(
                f"validation at epoch {self.current_epoch} gave non-finite logits on {nonfinite} "
                f"inputs (method {self._method_name}, sigma {self.sigma}): the run has diverged. Nothing was "
                f"saved from this epoch: {self._saved_state()}. Lower the learning rate (optim.optimizer.lr)"
            )

    @property
    def certified_model(self) -> nn.Module:
        """What certification smooths: the base classifier f, or a randomized
        :class:`~rs_lightning.smoothing.pipeline.NoisePipeline` around it (ARS)."""
        return self.model

    def noisy_validation_logits(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Logits of the certified model on one noise draw per input (validation)."""
        return self.model(x + self.training_noise(x, generator))

    def validation_step(self, batch, batch_idx: int) -> None:
        """Accuracy of the base classifier under one noise draw per test input (Cohen et al.'s train.py)."""
        x, y = batch
        if self._val_generator is None:
            self._val_generator = self._generator(1)
        logits = self.noisy_validation_logits(x, self._val_generator)
        self._val_nonfinite += int((~torch.isfinite(logits).all(dim=1)).sum())
        self.val_acc_noisy.update((logits.argmax(dim=1) == y).float())
        self.val_loss.update(F.cross_entropy(logits, y, reduction="none"))
        self.log("val/acc_noisy", self.val_acc_noisy, prog_bar=True, on_epoch=True, batch_size=len(x))
        self.log("val/loss", self.val_loss, on_epoch=True, batch_size=len(x))

    def prepare(self, input_shape: tuple[int, ...], resuming: bool) -> None:
        """Called by train.py before the trainer exists: build and load what the method reads from files
        (``input_shape`` is the data's (C, H, W); ``resuming``: the checkpoint restores the weights), so that
        a bad file is a one-line error before any work. Nothing by default."""

    def trained_parameters(self):
        """The parameters the optimizer steps: all of the module's, or a method's own part (a frozen
        classifier's are left out)."""
        return self.parameters()

    def configure_optimizers(self):
        optimizer = self.optimizer_factory(params=self.trained_parameters())
        if self.scheduler_factory is None:
            return optimizer
        scheduler = self.scheduler_factory(optimizer=optimizer)
        schedule.step_before_training([scheduler], self.scheduler_epoch_offset)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}

    # ----------------------------------------------------------- checkpoints
    def checkpoint_meta(self) -> CheckpointMeta:
        """The metadata saved in every checkpoint: :attr:`metadata` with this method's sigma and noise."""
        return dataclasses.replace(self.metadata or CheckpointMeta(), sigma=self.sigma, noise=self.noise)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        require_finite_weights(self, self.current_epoch, self.global_step)
        checkpoint[CHECKPOINT_KEY] = self.checkpoint_meta().to_dict()
        checkpoint["rs_lightning_noise_state"] = self.noise_generator.get_state()
        checkpoint["rs_lightning_rng_states"] = global_rng_states()
        checkpoint["rs_lightning_skipped_steps"] = self.skipped_steps
        checkpoint["rs_lightning_epoch_steps"] = [self._epoch_skipped, self._epoch_steps]  # mid-epoch saves

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        """Restore this method's own state; first refuse a checkpoint trained under other settings than
        this run's (:func:`~rs_lightning.models.resume.check_resumable`), whichever way Lightning found
        the file (a path, ``last``, ``hpc``, its SLURM auto-resume): the weights are never restored under
        metadata they did not train with."""
        if self.metadata is not None:
            source = (self._trainer.ckpt_path if self._trainer is not None else None) or "the checkpoint"
            if not isinstance(checkpoint.get(CHECKPOINT_KEY), dict):
                raise ConfigError(
                    "ckpt_path",
                    str(source),
                    "a training checkpoint written by train.py",
                    f"it has no {CHECKPOINT_KEY!r} metadata",
                )
            saved = CheckpointMeta.from_dict(checkpoint[CHECKPOINT_KEY])
            check_resumable(saved, self.checkpoint_meta(), source)
        state = checkpoint.get("rs_lightning_noise_state")
        if state is not None:  # applied when the generator is (re)created on the module's device
            self._restored_noise_state = state.cpu()
            self._train_generator = None
        if checkpoint.get("rs_lightning_rng_states") is not None:
            set_global_rng_states(checkpoint["rs_lightning_rng_states"])
        self.skipped_steps = int(checkpoint.get("rs_lightning_skipped_steps", 0))
        self._epoch_skipped, self._epoch_steps = (
            int(v) for v in checkpoint.get("rs_lightning_epoch_steps", (0, 0))
        )
