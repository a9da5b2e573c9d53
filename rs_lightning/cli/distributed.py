"""``certify.py trainer=ddp|ddp_sim``: certification split across Lightning DDP ranks.

Rank r takes the indices at positions r, r + world_size, ... of the run's explicit index list (no sampler, so
no padding and no duplicates), skips those already in any part file (a resumed run, whatever its world size
was), and appends its rows to its own part file ``certify.shard-<rank>-of-<world>.tsv``
(the layout of ``shard=i/k``, :mod:`rs_lightning.analysis.results`); afterwards the parts are merged into
``certify.tsv``. Rows do not depend on the rank that made them (noise seeded by ``(seed, idx, phase)``),
so the merged file equals a single-process run's except for the ``time`` column, whatever the world size,
and a killed run resumes with any world size.

Ranks die with their launcher (the certify.py process that started them): each asks the kernel for SIGKILL
when its parent ends (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a watchdog thread polls the parent), and
each holds the folder's rank lock while it certifies (:func:`~rs_lightning.analysis.results.hold_rank_lock`),
so a killed launcher leaves no rank writing and a resume is refused until every rank has ended.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from tqdm import tqdm

from rs_lightning.analysis.results import ResultWriter, done_indices, hold_rank_lock, shard_table
from rs_lightning.smoothing import CertificationSpec, run_dataset

from .common import tune_cpu_allocator

LAUNCHER_ENV = "RS_LIGHTNING_CERTIFY_LAUNCHER"
"""Environment variable holding the launcher's pid while it starts ranks (inherited by spawned ranks and by
the ranks Lightning's subprocess launcher starts, which run certify.py again)."""
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


@contextmanager
def launching_ranks() -> Iterator[int]:
    """Around the launch of the ranks: this process's pid in :data:`LAUNCHER_ENV` for the ranks it starts."""
    previous = os.environ.get(LAUNCHER_ENV)
    os.environ[LAUNCHER_ENV] = str(os.getpid())
    try:
        yield os.getpid()
    finally:
        if previous is None:
            os.environ.pop(LAUNCHER_ENV, None)
        else:
            os.environ[LAUNCHER_ENV] = previous


def launcher_of_this_rank() -> int | None:
    """The launcher's pid in a rank > 0 that Lightning's subprocess launcher (``strategy=ddp``) started by
    running certify.py again; None in the launcher or a single process."""
    pid = os.environ.get(LAUNCHER_ENV)
    if pid is None or "LOCAL_RANK" not in os.environ or int(pid) == os.getpid():
        return None
    return int(pid)


def die_with_launcher(launcher: int) -> None:
    """Make this rank die with its launcher (pid ``launcher``); exit at once if it is already gone."""
    if launcher == os.getpid():
        return
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    else:  # no parent-death signal: poll
        threading.Thread(target=_watch_parent, args=(launcher,), daemon=True).start()
    if os.getppid() != launcher:  # it ended before the signal was armed
        print(
            f"error: the certify.py launcher (pid {launcher}) of this rank is gone; stopping", file=sys.stderr
        )
        os._exit(1)


def _watch_parent(launcher: int) -> None:
    while os.getppid() == launcher:
        time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


TRAINING_ONLY = ("_target_", "max_epochs", "check_val_every_n_epoch", "log_every_n_steps", "default_root_dir")


class RankCertification(pl.LightningModule):
    """Certifies this rank's share of ``indices`` in one ``predict_step`` and writes its part file. The share
    depends on the position in ``indices`` only, so ranks starting at different times (each reading the part
    files, which other ranks may already be writing) still split the work exactly. Each rank dies with the
    process ``launcher`` and holds the folder's rank lock until it ends."""

    def __init__(
        self, model, dataset, indices: list[int], spec: CertificationSpec, num_classes: int, table: Path,
        columns: tuple[str, ...], make_rows, launcher: int,
    ) -> None:  # fmt: skip
        super().__init__()
        self.launcher, self._rank_lock = launcher, None
        self.model = model
        self.dataset, self.indices, self.spec = dataset, list(indices), spec
        self.num_classes, self.table, self.columns, self.make_rows = (
            num_classes,
            Path(table),
            columns,
            make_rows,
        )

    def setup(self, stage: str) -> None:
        die_with_launcher(self.launcher)
        self._rank_lock = hold_rank_lock(self.table.parent)
        if self.trainer.strategy.root_device.type == "cpu":
            tune_cpu_allocator()  # spawned ranks are new interpreters: glibc's defaults cost ~35% (bench/)

    def predict_dataloader(self) -> DataLoader:
        share = self.indices[self.global_rank :: self.trainer.world_size]
        done = done_indices(self.table)
        return DataLoader([[i for i in share if i not in done]], batch_size=None, collate_fn=lambda x: x)

    def predict_step(self, mine: list[int], batch_idx: int) -> None:
        world = self.trainer.world_size
        part = shard_table(self.table, (self.global_rank, world))
        progress = tqdm(
            total=len(mine) * world, unit="input", desc=f"{self.spec.mode} (rank 0 x {world} ranks)",
            disable=self.global_rank != 0, dynamic_ncols=True, mininterval=1.0,
        )  # fmt: skip
        with ResultWriter(part, self.columns) as writer:
            for result, labels, seconds in run_dataset(
                self.model, self.dataset, mine, self.spec, num_classes=self.num_classes, device=self.device
            ):
                for row in self.make_rows(result, labels, seconds):
                    writer.write(row)
                progress.update(min(len(labels) * world, progress.total - progress.n))
        progress.close()

    def teardown(self, stage: str) -> None:
        if self._rank_lock is not None:
            self._rank_lock.close()
            self._rank_lock = None

    def __getstate__(self) -> dict:  # spawned ranks get a copy without the launcher's open lock file
        return {**super().__getstate__(), "_rank_lock": None}


def certification_trainer(cfg_trainer: DictConfig) -> pl.Trainer:
    """A Lightning Trainer from a ``trainer=`` config, without its training-only keys or any logging."""
    kwargs: dict[str, Any] = OmegaConf.to_container(cfg_trainer, resolve=False)  # type: ignore[assignment]
    kwargs = {k: v for k, v in kwargs.items() if k not in TRAINING_ONLY}
    kwargs.update(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False, precision="32-true",
    )  # fmt: skip
    return pl.Trainer(**kwargs)


def certify_on_ranks(trainer: pl.Trainer, module: RankCertification) -> bool:
    """Run the ranks; True in the process that should merge (rank 0, or the launcher of spawned ranks)."""
    with launching_ranks():
        trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier()
    return trainer.global_rank == 0
