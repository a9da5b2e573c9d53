"""rs-lightning: train and certify randomized-smoothing classifiers (Cohen et al. 2019)."""

__version__ = "0.1.0"
