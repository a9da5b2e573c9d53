"""Data curation for the ACR-gaming recipe (Sun et al., ICML 2025, §3.2): per-training-image accuracy under
noise w.r.t. the true label, gathered across DDP ranks, and approximate-certified-radius weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from scipy.stats import norm
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from rs_lightning.smoothing.engine import sample_counts
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import ConfigError

REWEIGHT_CLIP = 0.75
"""p̂ is clipped to [0.75, 1] before the weight is computed (reference ``train_utils.py``)."""
REWEIGHT_ALPHA = 0.1
"""Level of the one-sided Clopper–Pearson bound of the weights (``proportion_confint(alpha=0.2)[0]``)."""


def radius_weights(p_hat, n: int) -> np.ndarray:
    """w = Φ⁻¹(CP_lower(⌊n·clip(p̂, 0.75, 1)⌋, n, 0.1)): the certified radius in units of σ at budget n
    (§3.2 step 3); for n = 16, k = 12…16 gives 0.154, 0.329, 0.526, 0.765, 1.108."""
    k = np.floor(n * np.clip(np.asarray(p_hat, dtype=np.float64), REWEIGHT_CLIP, 1.0))
    return norm.ppf(clopper_pearson_lower(k, n, REWEIGHT_ALPHA))


def load_pa_file(path: str | Path, num_train: int) -> np.ndarray:
    """A ``.npy`` of per-training-image p̂ in [0,1] (dataset order), e.g. the reference's ImageNet
    ``p_correct/train/imagenet/-1_50.npy``; anything else is a ConfigError on ``method.discard_pa_file``."""
    expected = f"a .npy of {num_train} per-training-image accuracies under noise in [0, 1]"
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ConfigError("method.discard_pa_file", str(path), expected, str(err)) from err
    if array.size != num_train or not np.issubdtype(array.dtype, np.number):
        raise ConfigError(
            "method.discard_pa_file", str(path), expected,
            f"it holds {array.dtype} of shape {list(array.shape)} for a training set of {num_train}",
        )  # fmt: skip
    array = array.astype(np.float64).reshape(-1)
    if not np.all((array >= 0) & (array <= 1)):
        raise ConfigError(
            "method.discard_pa_file", str(path), expected,
            f"its values span [{array.min()}, {array.max()}] (counts instead of shares?)",
        )  # fmt: skip
    return array


def true_label_hits(
    model: nn.Module,
    dataset: Dataset,
    indices: np.ndarray,
    *,
    num_samples: int,
    sigma: float,
    num_classes: int,
    batch_size: int,
    seed: int,
    device: torch.device,
    num_workers: int = 0,
) -> torch.Tensor:
    """How many of ``num_samples`` Gaussian draws ``f(x_i + δ)`` are classified as the **true** label y_i,
    for ``dataset[i]``, i in ``indices`` (one view per image, with the split's augmentation). Noise comes from
    the engine's ``Phase.ESTIMATION`` stream of ``(seed, i)``; ``batch_size`` noisy inputs per forward pass.
    Returns int64 ``(len(indices),)`` on ``device``."""
    loader = DataLoader(
        Subset(dataset, indices.tolist()),
        batch_size=max(1, batch_size // num_samples),
        shuffle=False,
        num_workers=num_workers,
    )
    hits, start = [], 0
    for x, y in loader:
        x, y = x.to(device), torch.as_tensor(y, device=device)
        counts = sample_counts(
            model, x, indices[start : start + len(x)], phase=Phase.ESTIMATION, num_samples=num_samples,
            sigma=sigma, num_classes=num_classes, batch_size=batch_size, seed=seed,
        )  # fmt: skip
        hits.append(counts.gather(1, y[:, None]).squeeze(1))
        start += len(x)
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.long, device=device)


def interleave_shares(gathered: torch.Tensor, total: int) -> np.ndarray:
    """Undo the rank-strided split: rank r estimated ``indices[r::W]``, padded to a common length;
    ``gathered`` is ``(W, L)``. Returns the ``total`` values in index order."""
    world = gathered.shape[0]
    out = np.empty(total, dtype=np.int64)
    rows = gathered.cpu().numpy()
    for rank in range(world):
        share = len(range(rank, total, world))
        out[rank::world] = rows[rank, :share]
    return out
