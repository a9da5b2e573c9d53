"""What a training run needs to survive faults: refuse non-finite state (losses, gradients, weights) and carry
the global RNG states through checkpoints (docs/scaling.md, "Scaling up and running for days"). Used by
:class:`~rs_lightning.methods.base.SmoothingMethod`."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

NONFINITE_POLICIES = ("stop", "skip")


class NonFiniteLossError(RuntimeError):
    """Training produced a non-finite loss (or weights); raised before anything non-finite is saved."""


class NonFiniteWeightsError(NonFiniteLossError):
    """Non-finite weights: the checkpoint is not written, so ``last.ckpt`` keeps the last good ones."""


def gradients_finite(module: nn.Module) -> bool:
    """Whether every parameter gradient of ``module`` is finite (one device sync)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return not grads or bool(torch.stack([g.isfinite().all() for g in grads]).all())


def check_skipped_share(
    skipped: int, steps: int, max_share: float, where: str, saved_state: Callable[[], str]
) -> str | None:
    """The warning for an epoch (``where``) that skipped ``skipped`` of ``steps`` optimizer steps, None when
    it skipped none; a :class:`NonFiniteLossError` when more than ``max_share`` of them (``saved_state()``
    says what the stopped run leaves)."""
    if not skipped:
        return None
    share = skipped / max(steps, 1)
    what = f"{where} skipped {skipped} of {steps} steps ({share:.0%}) for a non-finite loss or gradient"
    if share > max_share:
        raise NonFiniteLossError(
            f"{what}, more than on_nonfinite_loss_max_share={max_share}: the run has diverged. Nothing was "
            f"saved from this epoch: {saved_state()}. Lower the learning rate (optim.optimizer.lr)"
        )
    return what


def require_finite_weights(module: nn.Module, epoch: int, step: int) -> None:
    """Raise :class:`NonFiniteWeightsError` naming the non-finite weights, so no checkpoint is written."""
    bad = [name for name, p in module.named_parameters() if not bool(p.detach().isfinite().all())]
    if bad:
        raise NonFiniteWeightsError(
            f"weights {', '.join(bad[:3])}{' …' if len(bad) > 3 else ''} are non-finite at epoch {epoch}, "
            f"step {step}: not writing a checkpoint (the previous one stays). Lower the learning rate "
            "(optim.optimizer.lr)"
        )


def global_rng_states() -> dict:
    """Python, NumPy, torch CPU (and CUDA) RNG states as tensors and plain values, so that a checkpoint
    holding them still loads with ``torch.load(weights_only=True)``."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    states = {
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(cached)],
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_global_rng_states(states: dict) -> None:
    """Inverse of :func:`global_rng_states` (CUDA states only when as many devices are visible)."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(int(v) for v in internal.tolist()), gauss))
    kind, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(states["torch"])
    cuda = states.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
