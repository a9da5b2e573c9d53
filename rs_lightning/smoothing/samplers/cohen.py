"""Cohen et al.'s fixed-n sampling (ICML 2019, Alg. 1): ``n0`` selection draws pick the class, ``n`` fresh
estimation draws count it, and the bound is at level α. The base class's defaults are this sampler."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Sampler


@dataclass(frozen=True)
class Cohen(Sampler):
    """No settings of its own: ``n0``, ``n`` and ``alpha`` are the spec's."""

    name = "cohen"
    modes = ("certify", "predict")
