"""Argument checks shared by the architectures (Hydra may pass ListConfig instead of tuples)."""

from __future__ import annotations

from collections.abc import Sequence


def chw(input_shape: Sequence[int]) -> tuple[int, int, int]:
    """Validate and return ``input_shape`` as a (C, H, W) tuple of positive ints."""
    shape = tuple(int(v) for v in input_shape)
    if len(shape) != 3 or min(shape) < 1:
        raise ValueError(f"input_shape must be (C, H, W) with positive entries, got {tuple(input_shape)}")
    return shape  # type: ignore[return-value]


def ints(values: Sequence[int] | int, name: str) -> tuple[int, ...]:
    """Return ``values`` as a tuple of positive ints (a single int is allowed)."""
    out = (int(values),) if isinstance(values, int) else tuple(int(v) for v in values)
    if not out or min(out) < 1:
        raise ValueError(f"{name} must be positive ints, got {values!r}")
    return out
