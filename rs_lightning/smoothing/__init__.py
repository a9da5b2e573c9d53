"""The randomized-smoothing core: no Lightning, no Hydra. Certify any ``nn.Module`` in three lines::

from rs_lightning.smoothing import Smooth
smoothed = Smooth(model, num_classes=10, sigma=0.25)
label, radius = smoothed.certify(x, n0=100, n=100_000, alpha=0.001, batch_size=1000)
"""

from .dataset import certify_dataset, inputs_per_call
from .engine import ABSTAIN, CertifyResult, certify_batch, predict_batch, sample_counts
from .noise import NOISE_BLOCK, Phase
from .smooth import Smooth
from .stats import (
    clopper_pearson_interval,
    clopper_pearson_lower,
    max_certifiable_radius,
    radius_from_pa,
    top_two_pvalue,
)

__all__ = [
    "ABSTAIN",
    "NOISE_BLOCK",
    "CertifyResult",
    "Phase",
    "Smooth",
    "certify_batch",
    "certify_dataset",
    "inputs_per_call",
    "clopper_pearson_interval",
    "clopper_pearson_lower",
    "max_certifiable_radius",
    "predict_batch",
    "radius_from_pa",
    "sample_counts",
    "top_two_pvalue",
]
