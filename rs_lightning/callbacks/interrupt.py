"""Ctrl-C or SIGTERM during training writes a checkpoint to resume from (``ckpt_path=last``), in one process
and under DDP alike."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info

from rs_lightning.interrupts import Interrupted


class CheckpointOnInterrupt(pl.Callback):
    """On Ctrl-C (SIGINT) or SIGTERM (a cluster's preemption or time limit, ``kill``) while fitting: save
    ``<dirpath>/last.ckpt`` at the end of the current training step and stop with
    :class:`Interrupted`.

    The handlers only note the signal. At the end of every training batch the ranks agree whether any of
    them was signalled (a max all-reduce under DDP, so a signal to one rank, or to the launcher, which
    passes it on, stops them all at the same step); then every rank saves together (the file is written
    once, by rank 0), the step's log row is written and the run stops. The state saved is the one of a step
    checkpoint that Lightning's ``ModelCheckpoint(every_n_train_steps=…)`` writes in the same hook, which
    Lightning resumes exactly: every step once, the same logged steps. Not after a batch that validation or
    the epoch's end follows (a resume from there would skip them): the run goes on to the next step. A
    signal during validation stops at the next training batch; one after the last batch still ends the run
    as interrupted. A second Ctrl-C stops at once, without a checkpoint (a state in the middle of a step is
    not one to resume from): the last one written stays. Nothing is written when the weights are
    non-finite (the method refuses to save them). Where SIGINT is ignored (a job started with ``&`` from a
    script) or handled by someone else, it is left alone.
    """

    def __init__(self, dirpath: str) -> None:
        self.dirpath = Path(dirpath)
        self._signal: int | None = None
        self._installed = self._speaks = False

    # ---------------------------------------------------------------- signals
    def _install(self, trainer: pl.Trainer) -> None:
        """The handlers, installed once per fit after Lightning's signal connector noted the handlers it puts
        back at its teardown (so these never outlive the fit, finished or failed)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._installed, self._signal, self._speaks = True, None, trainer.global_rank == 0
        signal.signal(signal.SIGTERM, self._note)
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, self._note)

    def _note(self, signum, frame) -> None:
        if signum == signal.SIGINT and self._signal == signal.SIGINT:  # a second Ctrl-C: at once
            raise KeyboardInterrupt
        if self._signal is None:
            self._signal = signum
            if not self._speaks:
                return
            name = signal.Signals(signum).name
            again = " (Ctrl-C again to stop at once, without one)" if signum == signal.SIGINT else ""
            os.write(2, f"{name}: writing a checkpoint at the end of this training step{again}\n".encode())

    def on_sanity_check_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._install(trainer)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._installed, self._signal = False, None

    # ---------------------------------------------------------------- the stop
    def _agreed_signal(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> int:
        """The signal any rank noted (0: none), the same on every rank."""
        if trainer.world_size == 1:
            return self._signal or 0
        noted = torch.tensor([self._signal or 0], device=pl_module.device)
        torch.distributed.all_reduce(noted, op=torch.distributed.ReduceOp.MAX)
        return int(noted.item())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        signum = self._agreed_signal(trainer, pl_module)
        if not signum or _validation_follows(trainer, batch_idx):
            return
        path = self.dirpath / "last.ckpt"
        cause = signal.Signals(signum).name
        trainer._logger_connector.update_train_step_metrics()  # this step's row, which Lightning logs next
        for logger in trainer.loggers:
            logger.save()  # a spawned rank ends without Lightning's teardown, which would flush them
        try:
            trainer.save_checkpoint(path, weights_only=False)
        except Exception as err:  # e.g. NonFiniteWeightsError: keep the previous checkpoint
            rank_zero_info(f"{cause}: no checkpoint written ({err})")
        else:
            rank_zero_info(
                f"{cause} at epoch {trainer.current_epoch}, step {trainer.global_step}: wrote {path}; "
                "resume with ckpt_path=last and the same hydra.run.dir"
            )
        raise Interrupted(signum)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        signum = self._agreed_signal(trainer, pl_module)
        if signum:  # after the last step: the final checkpoint is written, but the run was stopped
            raise Interrupted(signum)


def _validation_follows(trainer: pl.Trainer, batch_idx: int) -> bool:
    """Whether validation (or the epoch's end) follows this training batch. Lightning resumes a checkpoint
    saved there without that validation and its epoch-end checkpoint, so the stop waits one more step."""
    interval = trainer.val_check_batch
    last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    return last or (isinstance(interval, int) and (batch_idx + 1) % interval == 0)
