"""The randomized-smoothing core: no Lightning, no Hydra. Certify any ``nn.Module`` in three lines::

from rs_lightning.smoothing import Smooth
smoothed = Smooth(model, num_classes=10, sigma=0.25)
label, radius = smoothed.certify(x, n0=100, n=100_000, alpha=0.001, batch_size=1000)
"""

from .certificate import NOISES, NORMS, Certificate
from .dataset import certify_dataset, inputs_per_call, run_dataset
from .engine import (
    ABSTAIN,
    CertifyResult,
    PredictResult,
    certify_batch,
    predict_batch,
    prepare,
    sample_counts,
)
from .noise import NOISE_BLOCK, Phase
from .noises import NOISE_CLASSES, Noise, noise_of
from .pipeline import NoisePipeline
from .precision import BaseClassifier, NonFiniteLogitsError
from .samplers import SAMPLERS, Cohen, InputSpecific, Sampler, Sequential, register_sampler
from .smooth import Smooth
from .spec import CertificationSpec
from .stats import clopper_pearson_interval, clopper_pearson_lower, top_two_pvalue

__all__ = [
    "ABSTAIN",
    "NOISE_BLOCK",
    "NOISES",
    "NOISE_CLASSES",
    "Noise",
    "NORMS",
    "NoisePipeline",
    "BaseClassifier",
    "Certificate",
    "CertificationSpec",
    "CertifyResult",
    "Cohen",
    "InputSpecific",
    "SAMPLERS",
    "Sampler",
    "Sequential",
    "NonFiniteLogitsError",
    "Phase",
    "PredictResult",
    "Smooth",
    "certify_batch",
    "certify_dataset",
    "clopper_pearson_interval",
    "clopper_pearson_lower",
    "inputs_per_call",
    "noise_of",
    "predict_batch",
    "prepare",
    "register_sampler",
    "run_dataset",
    "sample_counts",
    "top_two_pvalue",
]
