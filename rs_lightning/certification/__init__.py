"""Certification runs: a validated :class:`CertificationPlan` (:mod:`.plan`), executed once
(:mod:`.execute`) by one process, a ``shard=i/k`` part or DDP ranks (:mod:`.ranks`), which differ only in
the :class:`Part` each certifies (:mod:`.part`); a finished run's summary (:mod:`.summary`). Above the core
(:mod:`rs_lightning.smoothing`) and the run folder (:mod:`rs_lightning.runs`); nothing here
reads a config."""

from .execute import execute
from .plan import CertificationPlan, OneProcess, Part, Ranks
from .summary import finish_run, format_summary, merge_run

__all__ = [
    "CertificationPlan",
    "OneProcess",
    "Part",
    "Ranks",
    "execute",
    "finish_run",
    "format_summary",
    "merge_run",
]
