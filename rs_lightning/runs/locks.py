"""The locks of a run folder.

Each result file has one writer at a time (an exclusive ``flock`` that the OS drops when the process dies, so
a killed run never blocks its resume). A run folder is locked too (``.lock``): exclusively by an unsharded or
distributed run, shared by ``shard=i/k`` runs, which write ``certify.shard-<i>-of-<k>.tsv`` each
(:mod:`~rs_lightning.runs.parts`). The ranks of a distributed run (``trainer=ddp|ddp_sim``) each hold a shared
lock on ``.ranks.lock`` while they certify, and every run that takes the folder checks that none does: a run
is refused while any rank of an earlier one still lives, even once its launcher is gone.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .format import ResultFileError


def try_flock(path: str | os.PathLike, shared: bool = False):
    """Open ``path`` for appending (created if missing) and take a non-blocking ``flock`` on it, shared or
    exclusive; the returned file holds the lock until it is closed (or the process ends). None when another
    process holds a conflicting lock."""
    handle = Path(path).open("a", encoding="utf-8")  # noqa: SIM115 (returned: it holds the lock)
    try:
        fcntl.flock(handle.fileno(), (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        return None
    return handle


class FolderLock:
    """``flock`` on ``<folder>/.lock``: ``shared`` for shard runs, exclusive otherwise; refused as well while
    a rank of a distributed run holds ``.ranks.lock`` (see the module) unless ``check_ranks`` is False (the
    ranks of one job that a cluster launched side by side, which hold it themselves)."""

    def __init__(self, folder: str | os.PathLike, shared: bool, check_ranks: bool = True) -> None:
        self.path = Path(folder) / ".lock"
        self._file = try_flock(self.path, shared)
        if self._file is None:
            raise ResultFileError(
                f"output_dir={str(self.path.parent)!r} is in use by another running certify.py "
                f"({'an unsharded run' if shared else 'a run'}); wait for it, run parts side by side with "
                "shard=i/k, or use another output_dir"
            ) from None
        ranks = try_flock(Path(folder) / RANKS_LOCK) if check_ranks else None
        if check_ranks and ranks is None:
            self._file.close()
            raise ResultFileError(
                f"output_dir={str(self.path.parent)!r} is in use by ranks of a distributed certify.py "
                "(trainer=ddp|ddp_sim) that are still running; wait for them to end (they stop within "
                "seconds once their launcher is gone), or use another output_dir"
            ) from None
        if ranks is not None:
            ranks.close()

    def release(self) -> None:
        self._file.close()

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


RANKS_LOCK = ".ranks.lock"
"""Held (shared) by every rank of a distributed run while it certifies (:func:`hold_rank_lock`)."""


def hold_rank_lock(folder: str | os.PathLike):
    """A shared ``flock`` on ``<folder>/.ranks.lock`` for a rank of a distributed run; the returned file
    holds it until closed or until the process ends. A ResultFileError if a run is checking the folder at
    this instant (only a new run whose launcher holds ``.lock``, so this rank's launcher is gone)."""
    handle = try_flock(Path(folder) / RANKS_LOCK, shared=True)
    if handle is None:
        raise ResultFileError(f"{folder} was taken by another run while this rank started; stopping")
    return handle
