"""Test-subset selection shared by ``certify.py`` and the certification callback."""

from __future__ import annotations

from rs_lightning.validation import ConfigError, require_at_least


def subset_indices(size: int, skip: int = 1, start: int = 0, max: int | None = None) -> list[int]:  # noqa: A002
    """Indices ``start, start+skip, ...`` below ``min(size, max)``.

    ``skip``/``max`` as in Cohen et al.'s certify.py, ``start`` as MACER's ``start_img``.
    """
    require_at_least("skip", skip, 1)
    require_at_least("start", start, 0)
    if max is not None:
        require_at_least("max", max, 1)
    stop = size if max is None else min(size, max)
    if start >= stop:
        raise ConfigError("start", start, f"below min(dataset size {size}, max={max})")
    return list(range(start, stop, skip))


def evenly_spaced(size: int, count: int) -> list[int]:
    """``count`` indices spaced by ``skip = size // count`` from 0: equal to
    ``subset_indices(size, skip, 0, skip * count)``, so certify.py can reproduce the subset."""
    require_at_least("num_inputs", count, 1)
    skip = max(1, size // count)
    return subset_indices(size, skip=skip, start=0, max=skip * min(count, size))


def parse_shard(value) -> tuple[int, int] | None:
    """``shard=i/k`` (the i-th of k disjoint parts, 0-based) as ``(i, k)``; None for no sharding."""
    if value is None:
        return None
    text = str(value).strip()
    parts = text.split("/")
    if len(parts) == 2 and all(p.strip().isdigit() for p in parts):
        i, k = int(parts[0]), int(parts[1])
        if k >= 1 and 0 <= i < k:
            return i, k
    raise ConfigError("shard", value, "i/k with integers 0 <= i < k, e.g. shard=0/4 (null: no sharding)")
