"""torchmetrics Metrics for smoothed classifiers (DDP-safe; functional twins in ``rs_lightning.analysis``)."""

from .certification import AverageCertifiedRadius, CertifiedAccuracy, PAEcdf, PAEstimates

__all__ = ["AverageCertifiedRadius", "CertifiedAccuracy", "PAEcdf", "PAEstimates"]
