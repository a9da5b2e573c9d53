"""A certification run as one plan: what to certify (the spec, the model, the inputs), where its rows go
(the run folder and the record it keeps), and how processes share the inputs.
:func:`rs_lightning.cli.certify.plan_run` builds and validates it from a config before any work;
:func:`~rs_lightning.certification.execute` runs it and reads nothing else.

A single process, ``shard=i/k`` and DDP ranks differ only in their :class:`Part`: which of the run's inputs a
process takes and which file its rows go to. Rows do not depend on the process that made them (noise seeded
by ``(seed, idx, phase)``), so any split gives the same merged table, except for the ``time`` column.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.utils.data import Dataset

from rs_lightning.runs import ResultTable, RunRecord, result_table, shard_table
from rs_lightning.smoothing import CertificationSpec

if TYPE_CHECKING:
    import lightning.pytorch as pl


@dataclass(frozen=True)
class Part:
    """Part ``index`` of ``count`` interleaved parts of a run's inputs (``indices[index::count]``), written
    to the table itself (``own_file=False``: the only process) or to its own part file
    ``<table>.shard-<index>-of-<count>.tsv`` (``shard=i/k``, and each DDP rank), which the last process to
    finish merges into the table."""

    index: int = 0
    count: int = 1
    own_file: bool = False

    def inputs(self, indices: Sequence[int]) -> list[int]:
        return list(indices[self.index :: self.count])

    def file(self, table: Path) -> Path:
        return shard_table(table, (self.index, self.count)) if self.own_file else table


@dataclass(frozen=True)
class OneProcess:
    """This process certifies ``part`` on ``device``: the whole run, or part i of k (``shard=i/k``) while
    the other parts run side by side."""

    device: torch.device
    part: Part = Part()


@dataclass(frozen=True)
class Ranks:
    """Lightning DDP ranks (``trainer=ddp|ddp_sim``): rank r of w certifies ``Part(r, w, own_file=True)``.
    ``launcher``: in a rank that Lightning started by running certify.py again, the pid of the certify.py
    that launched it; None in the launcher."""

    trainer: pl.Trainer
    launcher: int | None = None


@dataclass(frozen=True, eq=False)
class CertificationPlan:
    """Everything a certification run needs, resolved and validated: the spec (sigma, norm, noise and
    precision resolved), the base classifier on its device, the dataset and the run's indices into it, the
    folder and the :class:`RunRecord` it keeps in ``settings.json`` (what a resume must match), and the
    processes that certify it (None only in the copy a DDP rank holds). The model must map [0,1] inputs to
    logits; :func:`~rs_lightning.certification.execute` moves it to a :class:`OneProcess`'s device."""

    spec: CertificationSpec
    model: nn.Module
    num_classes: int
    dataset: Dataset
    indices: list[int]
    record: RunRecord
    out: Path
    processes: OneProcess | Ranks | None

    def __post_init__(self) -> None:
        """Refuse a record that does not describe this run: ``settings.json`` is what resumes, merges and
        reports trust, while the rows come from ``spec`` and ``indices``."""
        object.__setattr__(self, "out", Path(self.out))
        object.__setattr__(self, "indices", [int(i) for i in self.indices])
        if self.record.spec != self.spec:
            raise ValueError(f"record.spec {self.record.spec} differs from the plan's spec {self.spec}")
        if self.record.subset is not None and self.record.indices() != self.indices:
            raise ValueError(f"record.subset {self.record.subset} does not give the plan's indices")

    @property
    def table(self) -> ResultTable:
        """CERTIFY or PREDICT: the one choice by ``spec.mode``."""
        return result_table(self.spec.mode)

    @property
    def table_path(self) -> Path:
        return self.table.path(self.out)
