"""SIGINT and SIGTERM: how a run stops on them, in one process and across the ranks of a spawned DDP job.

Training stops at the end of a step with a checkpoint
(:class:`~rs_lightning.callbacks.CheckpointOnInterrupt`); certification stops at once
(:func:`stop_at_once_on_signals`), since every finished input's row is flushed already. Both end in
:class:`Interrupted`, whose exit status says the signal.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(SystemExit):
    """A run stopped by SIGINT or SIGTERM; exits with 128 + the signal number (130, 143: the shell's
    convention), so a job script or scheduler sees an unfinished run, never a finished or failed one. A
    ``SystemExit``: a spawned DDP rank exits with this status instead of reporting an error."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + int(signum))
        self.signum = int(signum)

    @classmethod
    def from_exit_status(cls, status: int | None) -> Interrupted | None:
        """The interruption a process's exit status says (e.g. a rank's), or None for any other status."""
        signum = (status or 0) - 128
        return cls(signum) if signum in STOP_SIGNALS else None


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _noted(signum, frame) -> None:
    """A stop already under way (a handler, not SIG_IGN: Python refuses a signal that arrives as its
    handler becomes SIG_IGN with an OSError)."""


def raise_on_stop_signals() -> dict[int, Any]:
    """From now on SIGINT and SIGTERM raise :class:`Interrupted` at once (SIGINT only where Python's own
    Ctrl-C handler is in place: not where it is ignored, as in a job started with ``&`` from a script, or
    handled by someone else); returns the handlers replaced. In the main thread only."""
    replaced: dict[int, Any] = {}
    if not _in_main_thread():
        return replaced

    def stop(signum, frame) -> None:
        signal.signal(signal.SIGTERM, _noted)  # one stop: a launcher passing it on must not cut the
        signal.signal(signal.SIGINT, signal.default_int_handler)  # unwinding short; Ctrl-C still can
        raise Interrupted(signum)

    for signum in STOP_SIGNALS:
        handler = signal.getsignal(signum)
        if signum == signal.SIGTERM or handler is signal.default_int_handler:
            replaced[signum] = signal.signal(signum, stop)
    return replaced


@contextmanager
def stop_at_once_on_signals() -> Iterator[None]:
    """:func:`raise_on_stop_signals` for the duration of the block, then the handlers before it."""
    replaced = raise_on_stop_signals()
    try:
        yield
    finally:
        for signum, handler in replaced.items():
            signal.signal(signum, handler)


@contextmanager
def launcher_passes_signals_on(trainer=None) -> Iterator[list[int]]:
    """Around ``trainer.fit``/``predict`` in a process that only launches and waits for spawned ranks
    (``strategy=ddp_spawn``, e.g. ``trainer=ddp_sim``), which otherwise never see a signal sent to it alone
    (they go on to the end of the run, and the launcher waits for them): SIGINT and SIGTERM sent to it are
    passed to the ranks as SIGTERM, which stop them as they stop one process; a second Ctrl-C kills them at
    once. Yields the signals received, which say the launcher's exit status. Elsewhere (one process, or
    ranks that a launcher script or cluster started) it does nothing: each process there handles its own
    signals."""
    from lightning.pytorch.strategies.launchers.multiprocessing import _MultiProcessingLauncher

    received: list[int] = []
    launcher = None if trainer is None else trainer.strategy.launcher
    if not isinstance(launcher, _MultiProcessingLauncher) or not _in_main_thread():
        yield received
        return
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")

    def pass_on(signum, frame) -> None:
        ranks = [p for p in getattr(launcher, "procs", []) if p.is_alive() and p.pid is not None]
        again = signum == signal.SIGINT and signal.SIGINT in received
        received.append(signum)
        spawn_log.setLevel(logging.ERROR)  # torch's "Terminating process …" as the ranks end: expected now
        if not ranks or again:
            for rank in ranks:
                os.kill(rank.pid, signal.SIGKILL)
            raise Interrupted(signum)
        for rank in ranks:
            os.kill(rank.pid, signal.SIGTERM)

    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    for signum in STOP_SIGNALS:
        if previous[signum] is not signal.SIG_IGN:
            signal.signal(signum, pass_on)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
