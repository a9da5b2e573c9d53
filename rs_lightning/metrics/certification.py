"""torchmetrics Metrics over per-input smoothing results: pA estimates, ACR, certified accuracy, pA ECDF.

Every metric keeps per-input records (``dist_reduce_fx="cat"``) keyed by dataset index and drops repeated
indices at ``compute``, so the padding a DistributedSampler adds is never counted twice; ``compute`` then
applies the one definition of each metric, in :mod:`rs_lightning.analysis.metrics`, to the gathered records.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from rs_lightning.analysis import metrics
from rs_lightning.analysis.metrics import ECDF_GRID

_STATE_DTYPES = {"index": torch.long, "correct": torch.bool, "radius": torch.float64, "pa": torch.float64}


class _PerInputMetric(Metric):
    """Base: ``update(index, correct, radius, pa)`` with one entry per certified input.

    ``pa`` is p̂A w.r.t. the true label (0 for wrong or abstained inputs), as in Sun et al., ICML 2025,
    Appendix B.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in ("index", "correct", "radius", "pa"):
            self.add_state(name, default=[], dist_reduce_fx="cat")

    def _sync_dist(self, *args, **kwargs) -> None:
        # A rank that certified nothing must still send tensors of the right dtype (torchmetrics would
        # send a float32 placeholder, which gloo/NCCL cannot gather with the other ranks' int64/bool).
        for name, dtype in _STATE_DTYPES.items():
            state = getattr(self, name)
            if isinstance(state, list) and not state:
                state.append(torch.zeros(0, dtype=dtype, device=self.device))
        super()._sync_dist(*args, **kwargs)

    def update(
        self, index: torch.Tensor, correct: torch.Tensor, radius: torch.Tensor, pa: torch.Tensor
    ) -> None:
        tensors = [torch.as_tensor(t, device=self.device).flatten() for t in (index, correct, radius, pa)]
        if len({t.numel() for t in tensors}) != 1:
            raise ValueError(
                f"index, correct, radius and pa must have equal length, got {[t.numel() for t in tensors]}"
            )
        index, correct, radius, pa = tensors
        self.index.append(index.long())
        self.correct.append(correct.bool())
        self.radius.append(radius.double())
        self.pa.append(pa.double())

    def records(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(index, correct, radius, pa) with one entry per distinct index, sorted by index."""
        if isinstance(self.index, list) and not self.index:
            empty = torch.zeros(0, device=self.device)
            return empty.long(), empty.bool(), empty.double(), empty.double()
        index, correct, radius, pa = (
            dim_zero_cat(getattr(self, name)).to(dtype) for name, dtype in _STATE_DTYPES.items()
        )
        order = torch.argsort(index, stable=True)
        index = index[order]
        first = torch.ones_like(index, dtype=torch.bool)
        first[1:] = index[1:] != index[:-1]
        keep = order[first]
        return index[first], correct[keep], radius[keep], pa[keep]

    def _tensor(self, values) -> torch.Tensor:
        return torch.as_tensor(values, dtype=torch.float64, device=self.device)


class PAEstimates(_PerInputMetric):
    """Per-input p̂A (true label; 0 if wrong/abstained). ``compute`` → ``(index, pa)`` sorted by index."""

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        index, _, _, pa = self.records()
        return index, pa


class AverageCertifiedRadius(_PerInputMetric):
    """ACR = mean over inputs of radius·1[correct] (Zhai et al., ICLR 2020, MACER)."""

    def compute(self) -> torch.Tensor:
        _, correct, radius, _ = self.records()
        return self._tensor(metrics.average_certified_radius(radius.cpu().numpy(), correct.cpu().numpy()))


class CertifiedAccuracy(_PerInputMetric):
    """Share of inputs correct with radius >= r, for each r of ``radii`` (Cohen et al., ICML 2019, §4: the
    "approximate certified accuracy")."""

    def __init__(self, radii: Sequence[float], **kwargs):
        super().__init__(**kwargs)
        self.radii = [float(r) for r in radii]

    def compute(self) -> torch.Tensor:
        _, correct, radius, _ = self.records()
        return self._tensor(
            metrics.certified_accuracy(radius.cpu().numpy(), correct.cpu().numpy(), self.radii)
        )


class PAEcdf(_PerInputMetric):
    """pA ECDF y(x) = share of inputs with p̂A >= x on ``grid`` (Sun et al., ICML 2025; budget conversions in
    its Appendix B)."""

    def __init__(self, grid: Sequence[float] = tuple(ECDF_GRID), **kwargs):
        super().__init__(**kwargs)
        self.grid = [float(x) for x in grid]

    def compute(self) -> torch.Tensor:
        _, _, _, pa = self.records()
        return self._tensor(metrics.pa_ecdf(pa.cpu().numpy(), self.grid))
