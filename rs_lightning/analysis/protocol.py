"""Whether runs are comparable: the same protocol (the inputs, and the certification spec's protocol keys),
what differs between them, and what no run records.

Runs are only comparable on the same protocol: the same inputs (idx set), n, n0, α, seed, split, precision and
sampling (the spec's protocol keys). :func:`differences` is the one comparison of protocols, also of a run
with a published cell (:mod:`.published_numbers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from rs_lightning.runs import ResultFileError
from rs_lightning.smoothing.spec import PROTOCOL_KEYS

if TYPE_CHECKING:
    from .run_view import Run

INPUT_KEYS = ("subset", "dataset", "inputs_sha256")
"""The inputs a run certified, as its view reports them (:meth:`~.run_view.Run.protocol`): the idx set, the
dataset (its name and file hash where recorded) and the hash of the certified inputs themselves."""

COMPARED_KEYS = (*INPUT_KEYS, *PROTOCOL_KEYS)
"""What compared runs must share: their inputs and the certification spec's protocol keys (its schema,
:mod:`rs_lightning.smoothing.spec`)."""


class ProtocolMismatchError(ResultFileError):
    """Runs certified under different protocols were asked to be compared."""


def _show(key: str, value) -> str:
    if value is None:
        return "unknown"
    if key == "subset":
        idx = sorted(value)
        return f"{len(idx)} inputs (idx {idx[0]}…{idx[-1]})" if idx else "0 inputs"
    return str(value)


RECORDED_LATER = ("dataset", "inputs_sha256")
"""Protocol keys whose None means "not recorded" (runs certified before rs-lightning recorded them), not a
value: such a run is compared on the other keys, and the key is not verified for it
(:func:`unverified_keys`). For every other key None is a setting of its own (e.g. no ``noise_block``)."""


def differences(
    protocols: Sequence[tuple[str, Mapping]], keys: Iterable[str], agree: Callable | None = None
) -> dict[str, dict]:
    """``{key: {label: value}}`` for each of ``keys`` whose values in ``protocols`` (``(label, {key: value})``
    pairs) do not agree by ``agree(key, values)``; by default: are equal (for the keys of
    :data:`RECORDED_LATER`: in all that record it)."""
    agree = agree or _agree
    out = {}
    for key in keys:
        values = [protocol[key] for _, protocol in protocols]
        if not agree(key, values):
            out[key] = {label: value for (label, _), value in zip(protocols, values, strict=True)}
    return out


def protocol_differences(runs: list[Run]) -> dict[str, dict[str, str]]:
    """``{key: {label: value}}`` for every compared key (:data:`COMPARED_KEYS`) whose value is not the same
    in all runs (for the keys of :data:`RECORDED_LATER`: in all runs that record it)."""
    protocols = [(r.label, r.protocol()) for r in runs]
    out = {
        key: {label: _show(key, value) for label, value in values.items()}
        for key, values in differences(protocols, COMPARED_KEYS).items()
    }
    if "subset" in out:
        common = frozenset.intersection(*[p["subset"] for _, p in protocols])
        out["subset"]["shared by all"] = f"{len(common)} inputs"
    return out


def _agree(key: str, values: list) -> bool:
    """Whether runs' values of protocol ``key`` agree (for :data:`RECORDED_LATER`: those that record it)."""
    known = [v for v in values if v is not None] if key in RECORDED_LATER else values
    return all(v == known[0] for v in known[1:])


def same_inputs(a: Run, b: Run) -> bool:
    """Whether two runs certified the same inputs: the same idx set, and the same dataset and inputs hash
    where both record them (a paired verdict needs this even when ``--allow-mismatch`` reports the rest)."""
    pa, pb = a.protocol(), b.protocol()
    return all(_agree(key, [pa[key], pb[key]]) for key in ("subset", *RECORDED_LATER))


def unverified_keys(runs: list[Run]) -> list[str]:
    """Protocol keys unknown in every run (old TSVs record no α, seed, ...): equal, but not verified."""
    return [k for k in COMPARED_KEYS if all(r.protocol()[k] is None for r in runs)]


def partly_unverified(runs: list[Run]) -> dict[str, list[str]]:
    """``{key: labels}``: keys of :data:`RECORDED_LATER` that some runs record and the labelled ones do not,
    so they are not verified for those."""
    protocols = [r.protocol() for r in runs]
    out = {}
    for key in RECORDED_LATER:
        missing = [r.label for r, p in zip(runs, protocols, strict=True) if p[key] is None]
        if missing and len(missing) < len(runs):
            out[key] = missing
    return out


NOISE_KEY = "noise"
"""The one protocol key ``--compare-noises`` lets differ: runs smoothed with different noises but certified in
the same ball on the same inputs compare as certificates of that ball (Yang et al., ICML 2020, Section 5)."""


def incomparable(differences: dict, compare_noises: bool) -> dict:
    """The protocol differences that make runs incomparable: all, or all but the noise (compare_noises)."""
    return {k: v for k, v in differences.items() if not (compare_noises and k == NOISE_KEY)}


def check_protocol(
    runs: list[Run], allow_mismatch: bool = False, compare_noises: bool = False
) -> dict[str, dict[str, str]]:
    """Return :func:`protocol_differences`; raise :class:`ProtocolMismatchError` on any unless allowed
    (``allow_mismatch``: all of them; ``compare_noises``: a different noise, everything else the same)."""
    differences = protocol_differences(runs)
    refused = incomparable(differences, compare_noises)
    if refused and not allow_mismatch:
        detail = "; ".join(
            f"{key}: " + ", ".join(f"{label}: {value}" for label, value in values.items())
            for key, values in refused.items()
        )
        way_out = (
            "pass --compare-noises to compare them (they differ in their noise only)"
            if set(refused) == {NOISE_KEY}
            else "pass --allow-mismatch to report them anyway (marked)"
        )
        raise ProtocolMismatchError(
            f"the runs were certified under different protocols ({detail}); compare runs with the same "
            f"inputs, n, n0, alpha, seed, split, precision, sampling, noise and norm, or {way_out}"
        )
    return differences


def mismatched_keys(run: Run, reference: Run) -> list[str]:
    """Protocol keys in which ``run`` differs from ``reference``."""
    a, b = run.protocol(), reference.protocol()
    return [k for k in COMPARED_KEYS if a[k] != b[k]]


def sigma_groups(runs: list[Run]) -> dict[float | None, list[Run]]:
    """Runs by σ (None: unknown), in order of first appearance."""
    groups: dict[float | None, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.sigma, []).append(run)
    return groups
