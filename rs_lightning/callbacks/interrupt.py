"""Ctrl-C during training writes a checkpoint to resume from (``ckpt_path=last``)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info


class CheckpointOnInterrupt(pl.Callback):
    """On ``KeyboardInterrupt`` while fitting, save ``<dirpath>/last.ckpt`` (the state at the interrupt).

    Lightning catches the interrupt, calls ``on_exception`` and exits with status 1. Nothing is written
    when the weights are non-finite (the method refuses to save them), so the previous ``last.ckpt`` stays.
    A checkpoint written mid-epoch resumes mid-epoch (see the README on what that keeps bit-identical).
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, KeyboardInterrupt) or trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.sanity_checking or trainer.global_step == 0:
            return
        path = self.dirpath / "last.ckpt"
        try:
            trainer.save_checkpoint(path)
        except Exception as err:  # e.g. NonFiniteWeightsError: keep the previous checkpoint
            rank_zero_info(f"interrupted: no checkpoint written ({err})")
            return
        rank_zero_info(
            f"interrupted at epoch {trainer.current_epoch}, step {trainer.global_step}: wrote {path}; "
            "resume with ckpt_path=last and the same hydra.run.dir"
        )
