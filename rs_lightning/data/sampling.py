"""A training sampler whose pool (subset) and weights may change between epochs.

Made for the data curation of Sun, Mao, Müller & Vechev (ICML 2025, "Average Certified Radius is a Poor Metric
for Randomized Smoothing"; eth-sri/acr-weakness ``code/train.py``): discarding hard inputs (``Subset``) and
resampling by approximate certified radius (``WeightedRandomSampler(num_samples=N_full)``); its owner is
:class:`rs_lightning.data.curation.ACRCuration`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch
from torch.utils.data import Sampler


def _cpu_tensor(values, dtype: torch.dtype) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().to("cpu", dtype).flatten()
    return torch.as_tensor(np.asarray(values), dtype=dtype).flatten()


class ResamplingSampler(Sampler[int]):
    """Dataset indices for one epoch; every epoch yields ``num_samples`` indices.

    * Unchanged (no subset, no weights): a fresh random permutation of ``range(num_samples)`` each epoch,
      i.e. ``shuffle=True``.
    * After :meth:`set_subset` and/or :meth:`set_weights`: ``num_samples`` draws **with replacement** from
      the pool (the subset, or all indices), uniform or proportional to the weights — ``RandomSampler(
      replacement=True, num_samples=N)`` / ``WeightedRandomSampler(w, N)`` over a ``Subset``, so an epoch
      keeps the original dataset size.

    The draw of pass ``p`` after ``set_epoch(e)`` depends only on ``(seed, e, p)`` and the pool/weights, never
    on the process: under DDP, Lightning wraps this sampler in ``DistributedSamplerWrapper``, which
    materialises ``list(sampler)`` on every rank at each ``__iter__`` (forwarding ``set_epoch``) and hands
    rank r the positions ``r::world_size`` (after its own seeded position shuffle): the ranks share one draw.

    Args:
        num_samples: epoch length = size of the full dataset (indices are ``0 .. num_samples-1``).
        seed: base seed of the draws (use the same on every rank).
        before_draw: optional callable run at the start of every pass, *before* the indices are drawn. Lets
            the owner update the pool exactly when an epoch's order is fixed: with DataLoader workers,
            Lightning creates the first epoch's iterator of a fit (which prefetches indices) in
            ``FitLoop.setup_data``, before ``on_train_epoch_start``.
    """

    def __init__(
        self, num_samples: int, seed: int = 0, before_draw: Callable[[], None] | None = None
    ) -> None:
        if isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {num_samples!r}")
        self.num_samples = num_samples
        self.seed = int(seed)
        self.before_draw = before_draw
        self.epoch = 0
        self._passes = 0
        self.subset: torch.Tensor | None = None
        self.weights: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.num_samples

    @property
    def pool_size(self) -> int:
        """Number of indices that can be drawn (the subset's size, or ``num_samples``)."""
        return self.num_samples if self.subset is None else len(self.subset)

    @property
    def changed(self) -> bool:
        """True once a subset or weights were set (draws are then with replacement)."""
        return self.subset is not None or self.weights is not None

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's stream (called by Lightning, forwarded by ``DistributedSamplerWrapper``)."""
        self.epoch = int(epoch)
        self._passes = 0

    def set_subset(self, indices: Sequence[int] | np.ndarray | torch.Tensor | None) -> None:
        """Draw only from ``indices`` (distinct dataset indices); ``None`` = all. Resets the weights."""
        if indices is None:
            self.subset = None
        else:
            subset = _cpu_tensor(indices, torch.long)
            if len(subset) == 0:
                raise ValueError("the subset is empty: at least one index must be kept")
            if subset.min() < 0 or subset.max() >= self.num_samples:
                raise ValueError(f"subset indices must lie in [0, {self.num_samples})")
            if len(torch.unique(subset)) != len(subset):
                raise ValueError("subset indices must be distinct")
            self.subset = subset
        self.weights = None

    def set_weights(self, weights: Sequence[float] | np.ndarray | torch.Tensor | None) -> None:
        """Sampling weights aligned with the pool (the subset if set); ``None`` = uniform."""
        if weights is None:
            self.weights = None
            return
        w = _cpu_tensor(weights, torch.float64)
        if len(w) != self.pool_size:
            raise ValueError(f"got {len(w)} weights for a pool of {self.pool_size} indices")
        if not torch.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
            raise ValueError("weights must be finite, >= 0 and not all 0")
        self.weights = w

    def draw(self) -> torch.Tensor:
        """The indices of the next pass (advances the pass counter)."""
        seed = np.random.SeedSequence([self.seed, self.epoch, self._passes]).generate_state(1)[0]
        generator = torch.Generator().manual_seed(int(seed))
        self._passes += 1
        if not self.changed:
            return torch.randperm(self.num_samples, generator=generator)
        if self.weights is None:
            positions = torch.randint(self.pool_size, (self.num_samples,), generator=generator)
        else:
            positions = torch.multinomial(
                self.weights, self.num_samples, replacement=True, generator=generator
            )
        return positions if self.subset is None else self.subset[positions]

    def __iter__(self) -> Iterator[int]:
        if self.before_draw is not None:
            self.before_draw()
        return iter(self.draw().tolist())

    def state_dict(self) -> dict:
        """Pool and weights (tensors or None), e.g. for a checkpoint."""
        return {"subset": self.subset, "weights": self.weights}

    def load_state_dict(self, state: dict) -> None:
        self.set_subset(state.get("subset"))
        self.set_weights(state.get("weights"))
