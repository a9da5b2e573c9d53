"""Lightning callbacks."""

from .certification import CertificationCallback

__all__ = ["CertificationCallback"]
