"""When a recipe's LR drops take effect: the one place that times schedulers against epochs.

The scheduler steps once per epoch, after it (modern PyTorch), shifted by ``scheduler_epoch_offset`` = k so
that a recipe's LR drops land where its reference's do:

- k = 0: a drop at epoch e of the scheduler takes effect from 0-based epoch e (Cohen's and SmoothAdv's
  ``scheduler.step(epoch)`` at the start of each epoch; ACR-gaming's and ARS's ``step()`` after each epoch);
- k = 1: one epoch later: the reference calls the legacy ``scheduler.step(epoch)`` *after* each epoch
  (Consistency, SmoothMix, CAT-RS and the smoothing-consistency MNIST baselines: StepLR(30) drops from
  epochs 31 and 61; their ``train*.py`` scripts); the first k end-of-epoch steps are skipped;
- k = −1: one epoch earlier: the reference calls ``step()`` before each epoch (MACER's main.py); every
  scheduler is stepped once before training (a resume then restores the schedulers' state).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable

import torch

from rs_lightning.validation import ConfigError


def epoch_offset(value) -> int:
    """``optim.scheduler_epoch_offset`` as an int; a one-line :class:`ConfigError` for anything else."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            "optim.scheduler_epoch_offset",
            value,
            "an integer (0, 1 or -1)",
            "1 = the reference calls scheduler.step(epoch) after each epoch (drops land one epoch later)",
        )
    return int(value)


def step_before_training(schedulers: Iterable, offset: int) -> None:
    """k < 0: step each new scheduler −k times before the first epoch."""
    with warnings.catch_warnings():  # "step() before optimizer.step()": intended here
        warnings.simplefilter("ignore", UserWarning)
        for scheduler in schedulers:
            for _ in range(-offset):
                scheduler.step()


def step_after_epoch(schedulers: Iterable, epoch: int, offset: int) -> None:
    """End of 0-based ``epoch``: step each scheduler, except during the first k epochs (k > 0)."""
    if epoch < offset:
        return
    for scheduler in schedulers:
        scheduler.step()


def lr_dropped(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the LR in effect (first parameter group) is below its initial value: false before the
    scheduler's first drop takes effect, and always without a scheduler."""
    group = optimizer.param_groups[0]
    return group["lr"] < group.get("initial_lr", group["lr"])
