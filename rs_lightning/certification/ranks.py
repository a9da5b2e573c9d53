"""``certify.py trainer=ddp|ddp_sim``: certification split across Lightning DDP ranks.

Rank r certifies ``Part(r, world_size, own_file=True)`` of the plan (:mod:`~rs_lightning.certification.plan`):
the indices at positions r, r + world_size, ... of the run's explicit index list (no sampler, so no padding
and no duplicates), skipping those already in any part file (a resumed run, whatever its world size was),
into its own part file ``certify.shard-<rank>-of-<world>.tsv`` (the layout of ``shard=i/k``); afterwards
the parts are merged into ``certify.tsv``. Rows do not depend on the rank that made them (noise seeded by
``(seed, idx, phase)``), so the merged file equals a single-process run's except for the ``time`` column,
whatever the world size, and a killed run resumes with any world size.

Ranks die with their launcher (the certify.py process that started them): each asks the kernel for SIGKILL
when its parent ends (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a watchdog thread polls the parent), and
each holds the folder's rank lock while it certifies (:func:`~rs_lightning.runs.locks.hold_rank_lock`),
so a killed launcher leaves no rank writing and a resume is refused until every rank has ended.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import lightning.pytorch as pl
from torch.utils.data import DataLoader

from rs_lightning.cpu_allocator import tune_cpu_allocator
from rs_lightning.interrupts import raise_on_stop_signals
from rs_lightning.runs import hold_rank_lock

from .part import certify_part
from .plan import CertificationPlan, Part, Ranks

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


class RankCertification(pl.LightningModule):
    """Certifies this rank's part of ``plan`` in one ``predict_step``. The part depends on the position in
    the plan's indices only, so ranks starting at different times (each reading the part files, which other
    ranks may already be writing) still split the work exactly. Each rank dies with the process
    ``launcher`` and holds the folder's rank lock until it ends."""

    def __init__(self, plan: CertificationPlan, launcher: int) -> None:
        super().__init__()
        self.launcher, self._rank_lock = launcher, None
        self.model = plan.model  # a submodule: Lightning moves it (and so the plan's) to the rank's device
        self.plan = dataclasses.replace(plan, processes=None)  # what to certify; the Trainer stays behind

    def setup(self, stage: str) -> None:
        die_with_launcher(self.launcher)
        self._rank_lock = hold_rank_lock(self.plan.out)
        if self.trainer.strategy.root_device.type == "cpu":
            tune_cpu_allocator()  # spawned ranks are new interpreters, with glibc's defaults again

    def on_predict_start(self) -> None:
        """SIGINT and SIGTERM stop this rank at once (its finished rows are flushed), replacing Lightning's
        SIGTERM handler, which would wait for a collective that the other ranks may never call."""
        raise_on_stop_signals()

    def predict_dataloader(self) -> DataLoader:
        # one batch: this rank's (index, count); Lightning moves batches, so no frozen Part travels in it
        position = (self.global_rank, self.trainer.world_size)
        return DataLoader([position], batch_size=None, collate_fn=lambda x: x)

    def predict_step(self, position: tuple[int, int], batch_idx: int) -> None:
        part = Part(*position, own_file=True)
        certify_part(
            self.plan,
            part,
            self.device,
            label=f"{self.plan.spec.mode} (rank 0 x {part.count} ranks)",
            show_progress=part.index == 0,
            progress_scale=part.count,
        )

    def teardown(self, stage: str) -> None:
        if self._rank_lock is not None:
            self._rank_lock.close()
            self._rank_lock = None

    def __getstate__(self) -> dict:  # spawned ranks get a copy without the launcher's open lock file
        return {**super().__getstate__(), "_rank_lock": None}


def certify_on_ranks(plan: CertificationPlan, ranks: Ranks) -> bool:
    """Run the ranks on ``plan``; True in the process that should merge (rank 0, or the launcher of spawned
    ranks)."""
    trainer = ranks.trainer
    module = RankCertification(plan, ranks.launcher or os.getpid())
    with launching_ranks():
        trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier()
    return trainer.global_rank == 0
