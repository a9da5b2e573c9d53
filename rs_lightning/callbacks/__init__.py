"""Lightning callbacks."""

from .certification import CertificationCallback
from .interrupt import CheckpointOnInterrupt

__all__ = ["CertificationCallback", "CheckpointOnInterrupt"]
