"""Ctrl-C or SIGTERM during training writes a checkpoint to resume from (``ckpt_path=last``)."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import lightning.pytorch as pl
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException


class CheckpointOnInterrupt(pl.Callback):
    """On ``KeyboardInterrupt`` (Ctrl-C) or SIGTERM (a cluster's preemption or time limit, ``kill``) while
    fitting, save ``<dirpath>/last.ckpt`` (the state at the interrupt).

    Both stop at a batch boundary. Lightning notes a SIGTERM and raises ``SIGTERMException`` at the next
    training or validation batch; a single-process run without DataLoader workers here does the same with
    Ctrl-C (a second Ctrl-C stops at once; a Ctrl-C after the last batch still ends the run as
    interrupted). A ``KeyboardInterrupt`` raised mid-batch — after the optimizer step but before
    Lightning counted the batch as completed — left a checkpoint that repeated that batch on resume (one
    step too many; seen as 541 steps for 540). Work between batches, e.g. the ACR-gaming p̂ estimate at an
    epoch start, finishes first. Lightning then exits with status 1 (Ctrl-C), and
    :func:`rs_lightning.cli.train.train` with 143 (SIGTERM). Nothing is written when the weights are
    non-finite (the method refuses to save them), so the previous ``last.ckpt`` stays. A checkpoint written
    mid-epoch resumes mid-epoch (see docs/scaling.md on what that keeps bit-identical). Under DDP, with
    DataLoader workers (a terminal's Ctrl-C stops them too), and where SIGINT is ignored or handled by
    someone else, Ctrl-C is left to Python and Lightning as it is.
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)
        self._ctrl_c = False

    # ------------------------------------------------------------ Ctrl-C at a batch boundary
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Installed after Lightning's signal connector noted the handlers it finds: its teardown puts
        Python's handler back after every fit, finished or failed, so this one never outlives the fit."""
        self._ctrl_c = False
        in_charge = threading.current_thread() is threading.main_thread() and trainer.world_size == 1
        if (
            in_charge
            and not _loader_workers(trainer)
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            signal.signal(signal.SIGINT, self._note_ctrl_c)

    def _note_ctrl_c(self, signum, frame) -> None:
        if self._ctrl_c:  # the second Ctrl-C: at once
            raise KeyboardInterrupt
        self._ctrl_c = True
        os.write(2, b"Ctrl-C: stopping at the next batch (Ctrl-C again to stop at once)\n")

    def _stop_if_asked(self) -> None:
        if self._ctrl_c:
            raise KeyboardInterrupt

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._stop_if_asked()

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        if not trainer.sanity_checking:
            self._stop_if_asked()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._stop_if_asked()  # Ctrl-C after the last batch: still an interrupted run (exit 1), not 0

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._ctrl_c = False

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


def _loader_workers(trainer: pl.Trainer) -> bool:
    """Whether the fit's training or validation DataLoaders have worker processes: a terminal's Ctrl-C
    stops those at once, so the main process must not wait for the next batch (it would find them dead)."""

    def loaders(value):
        if isinstance(value, dict):
            value = list(value.values())
        return [x for v in value for x in loaders(v)] if isinstance(value, list | tuple) else [value]

    found = loaders(trainer.train_dataloader) + loaders(trainer.val_dataloaders)
    return any(getattr(loader, "num_workers", 0) > 0 for loader in found if loader is not None)
