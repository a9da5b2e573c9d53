"""Ctrl-C or SIGTERM during training writes a checkpoint to resume from (``ckpt_path=last``)."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException


class CheckpointOnInterrupt(pl.Callback):
    """On ``KeyboardInterrupt`` (Ctrl-C) or SIGTERM (a cluster's preemption or time limit, ``kill``) while
    fitting, save ``<dirpath>/last.ckpt`` (the state at the interrupt).

    Lightning catches Ctrl-C at once and exits with status 1; it notes a SIGTERM and raises
    ``SIGTERMException`` at the next training or validation batch (work between batches, e.g. the
    ACR-gaming p̂ estimate at an epoch start, finishes first), and :func:`rs_lightning.cli.train.train`
    then exits with status 143. Nothing is written when the weights are non-finite (the method refuses to
    save them), so the previous ``last.ckpt`` stays. A checkpoint written mid-epoch resumes mid-epoch (see
    docs/scaling.md on what that keeps bit-identical).
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        if not isinstance(exception, KeyboardInterrupt | SIGTERMException):
            return
        if trainer.state.fn != TrainerFn.FITTING or trainer.sanity_checking or trainer.global_step == 0:
            return
        cause = "SIGTERM" if isinstance(exception, SIGTERMException) else "interrupted"
        path = self.dirpath / "last.ckpt"
        try:
            trainer.save_checkpoint(path)
        except Exception as err:  # e.g. NonFiniteWeightsError: keep the previous checkpoint
            rank_zero_info(f"{cause}: no checkpoint written ({err})")
            return
        rank_zero_info(
            f"{cause} at epoch {trainer.current_epoch}, step {trainer.global_step}: wrote {path}; "
            "resume with ckpt_path=last and the same hydra.run.dir"
        )
