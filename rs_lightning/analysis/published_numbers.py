"""The published numbers that ``scripts/reproduce.sh`` reproduces, in one table keyed by (dataset, method, σ).

Every value is computed from the authors' released certification logs (docs/references.md, "Released
certification logs"):

- **CIFAR-10**: Sun et al. 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing*,
  Table 2 as released logs (eth-sri/acr-weakness ``data/certify/cifar10``): 7 methods × σ 0.25 / 0.5 / 1.0,
  all 10,000 test images, N0 = 100, N = 100,000, α = 0.001. ``acr_gaming`` is the paper's own recipe ("ours").
- **MNIST**: Jeong & Shin 2020's MNIST table as released logs (jh-jeong/smoothing-consistency
  ``data/certify/mnist``): Gaussian (``cohen``), SmoothAdv, MACER, Consistency × σ 0.25 / 0.5 / 1.0, LeNet,
  the full 10,000 test images, the mean over the released seeds (5–6 runs each).
- **MNIST CAT-RS**: the ACR only (Jeong, Kim & Shin 2023, alinlab/smoothing-catrs ``data/mnist``); no
  certified accuracies, number of images or budget are used for these logs (assumed as for MNIST above,
  **[U]**).

Keys use this project's experiment names (``conf/experiment/<method>_<dataset>_sigma<025|050|100>.yaml``;
``cohen`` = Gaussian augmentation). Certified accuracies are stored in percent, as printed in the reference.
The module also holds the comparison of one of our certification runs with a cell (``python -m
rs_lightning.cli.report published``). ``python -m rs_lightning.cli.published_cells`` lists the cells or prints
one's protocol for scripts/reproduce.sh. Pure Python + numpy: no Lightning, no Hydra.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from rs_lightning.smoothing.spec import CertificationSpec

from .metrics import average_certified_radius, certified_accuracy
from .protocol import differences

DATASETS = ("cifar10", "mnist")
METHODS = ("cohen", "smoothadv", "macer", "consistency", "smoothmix", "catrs", "acr_gaming")
SIGMAS = (0.25, 0.5, 1.0)
INPUT_SHAPES = {"cifar10": (3, 32, 32), "mnist": (1, 28, 28)}
TRAIN_IMAGES = {"cifar10": 50_000, "mnist": 60_000}

SUN_TABLE2 = "Sun et al. 2025 Table 2 (released logs: eth-sri/acr-weakness data/certify/cifar10)"
MNIST_TABLE = (
    "Jeong & Shin 2020 MNIST table (released logs: jh-jeong/smoothing-consistency data/certify/mnist, "
    "mean over 5–6 seeds)"
)
CATRS_MNIST = "Jeong, Kim & Shin 2023 (CAT-RS released logs: alinlab/smoothing-catrs data/mnist; ACR only)"


@dataclass(frozen=True)
class Protocol:
    """How the published numbers were certified (Cohen et al. 2019 CERTIFY): indices ``start, start+skip,
    …`` (``num_images`` of them) of the test split, N0 selection draws, N estimation draws, level α."""

    n0: int = 100
    n: int = 100_000
    alpha: float = 0.001
    start: int = 0
    skip: int = 1
    num_images: int = 10_000

    def indices(self) -> range:
        return range(self.start, self.start + self.skip * self.num_images, self.skip)


@dataclass(frozen=True)
class PublishedCell:
    """One published result: ACR and certified accuracy (percent) at ``radii`` (empty: ACR only)."""

    dataset: str
    method: str
    sigma: float
    row: str
    """The row's name in the reference table."""
    acr: float
    radii: tuple[float, ...]
    accuracy_percent: tuple[float, ...]
    source: str
    protocol: Protocol = field(default_factory=Protocol)
    notes: tuple[str, ...] = ()

    @property
    def accuracy(self) -> tuple[float, ...]:
        """Certified accuracies as fractions."""
        return tuple(a / 100 for a in self.accuracy_percent)

    @property
    def experiment(self) -> str:
        """This project's experiment for the cell (``conf/experiment/<name>.yaml``)."""
        return f"{self.method}_{self.dataset}_sigma{sigma_tag(self.sigma)}"


_R025 = (0.0, 0.25, 0.5, 0.75)
_R050 = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75)
_R100 = (0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5)
_CIFAR10_RADII = {0.25: _R025, 0.5: _R050, 1.0: _R100}
_MNIST_RADII = tuple(0.25 * i for i in range(11))  # 0.00 … 2.50

# Sun et al. 2025, Table 2: (method, σ) → (row, ACR, certified accuracy % at _CIFAR10_RADII[σ])
_CIFAR10 = {
    ("cohen", 0.25): ("Gaussian", 0.487, (80.4, 66.8, 50.5, 32.7)),
    ("smoothadv", 0.25): ("SmoothAdv", 0.545, (74.0, 66.2, 56.7, 47.5)),
    ("macer", 0.25): ("MACER", 0.529, (78.7, 68.3, 55.9, 40.8)),
    ("consistency", 0.25): ("Consistency", 0.547, (75.8, 67.4, 57.5, 46.0)),
    ("smoothmix", 0.25): ("SmoothMix", 0.543, (77.1, 67.6, 56.8, 45.0)),
    ("catrs", 0.25): ("CAT-RS", 0.562, (76.3, 68.1, 58.8, 48.2)),
    ("acr_gaming", 0.25): ("ours", 0.564, (76.6, 69.0, 59.3, 48.3)),
    ("cohen", 0.5): ("Gaussian", 0.571, (68.8, 58.2, 46.2, 34.5, 24.5, 16.3, 10.2, 5.3)),
    ("smoothadv", 0.5): ("SmoothAdv", 0.703, (66.4, 58.7, 50.8, 43.0, 35.1, 27.7, 20.2, 13.2)),
    ("macer", 0.5): ("MACER", 0.680, (64.6, 57.4, 49.5, 42.0, 34.0, 26.4, 19.2, 12.0)),
    ("consistency", 0.5): ("Consistency", 0.716, (64.1, 57.6, 50.3, 42.9, 35.9, 29.1, 22.6, 16.0)),
    ("smoothmix", 0.5): ("SmoothMix", 0.738, (60.6, 55.2, 49.3, 43.3, 37.6, 32.1, 26.4, 20.5)),
    ("catrs", 0.5): ("CAT-RS", 0.757, (62.3, 56.8, 50.5, 44.6, 38.5, 32.7, 27.1, 20.6)),
    ("acr_gaming", 0.5): ("ours", 0.760, (59.3, 54.8, 49.6, 44.4, 38.9, 34.1, 29.0, 23.0)),
    ("cohen", 1.0): ("Gaussian", 0.543, (50.9, 36.5, 23.9, 13.7, 6.6, 2.5, 0.9, 0.2)),
    ("smoothadv", 1.0): ("SmoothAdv", 0.796, (43.6, 37.0, 30.7, 24.5, 18.8, 13.5, 8.9, 4.8)),
    ("macer", 1.0): ("MACER", 0.760, (39.5, 34.6, 28.9, 23.8, 18.6, 13.8, 8.8, 4.6)),
    ("consistency", 1.0): ("Consistency", 0.757, (45.7, 37.8, 29.7, 22.9, 16.6, 11.6, 7.3, 3.5)),
    ("smoothmix", 1.0): ("SmoothMix", 0.788, (42.4, 36.7, 30.0, 23.9, 18.6, 13.6, 9.3, 5.3)),
    ("catrs", 1.0): ("CAT-RS", 0.815, (43.2, 37.2, 31.0, 24.9, 19.3, 14.2, 9.8, 5.3)),
    ("acr_gaming", 1.0): ("ours", 0.844, (42.0, 36.5, 31.1, 25.6, 20.6, 16.1, 11.6, 6.7)),
}

# Jeong & Shin 2020 MNIST: (method, σ) → (row, ACR, certified accuracy % at r = 0, 0.25, …; printed columns)
_MNIST = {
    ("cohen", 0.25): ("Gaussian", 0.911, (99.2, 98.5, 96.7, 93.1, 0.0)),
    ("smoothadv", 0.25): ("SmoothAdv ε1 m4 T10", 0.932, (99.4, 99.0, 98.2, 96.8, 0.0)),
    ("macer", 0.25): ("MACER (deferred, λ16)", 0.920, (99.3, 98.7, 97.3, 94.7, 0.0)),
    ("consistency", 0.25): ("Consistency m2 λ10", 0.928, (99.4, 98.9, 97.9, 96.0, 0.0)),
    ("cohen", 0.5): ("Gaussian", 1.558, (99.2, 98.3, 96.9, 94.3, 89.8, 82.0, 67.8, 44.9, 0.0)),
    ("smoothadv", 0.5): ("SmoothAdv", 1.687, (99.0, 98.4, 97.4, 95.7, 92.9, 88.5, 81.1, 67.5, 0.0)),
    ("macer", 0.5): ("MACER (λ16)", 1.590, (98.7, 97.8, 96.3, 93.9, 90.1, 83.5, 72.1, 52.3, 0.0)),
    ("consistency", 0.5): ("Consistency m2 λ5", 1.655, (99.2, 98.5, 97.5, 95.8, 92.9, 87.7, 78.3, 60.4, 0.0)),
    ("cohen", 1.0): (
        "Gaussian",
        1.618,
        (96.3, 94.4, 91.4, 86.8, 79.9, 71.0, 59.5, 46.1, 32.5, 19.6, 10.9),
    ),
    ("smoothadv", 1.0): (
        "SmoothAdv",
        1.779,
        (95.8, 93.8, 90.7, 86.5, 80.8, 73.6, 64.4, 53.9, 43.3, 32.9, 22.6),
    ),
    ("macer", 1.0): (
        "MACER (λ6)",
        1.595,
        (91.6, 88.1, 83.4, 77.7, 71.1, 63.8, 55.7, 47.1, 38.7, 29.5, 20.1),
    ),
    ("consistency", 1.0): (
        "Consistency m2 λ5",
        1.738,
        (95.0, 92.9, 89.8, 85.4, 79.7, 72.8, 63.5, 53.0, 41.7, 30.9, 20.2),
    ),
}

# CAT-RS's released MNIST logs: ACR only
_CATRS_MNIST_ACR = {0.25: 0.933, 0.5: 1.700, 1.0: 1.831}

_MNIST_NOTE = (
    "the published values are the mean over the released seeds (5–6 runs); the seed-to-seed spread is "
    "0.1–0.5 points at small radii, up to about 2 points at the largest, up to ±0.008 ACR "
    "(the spread of those released seeds)"
)
_CATRS_MNIST_NOTE = (
    "the reference gives only the ACR of these logs, and states neither their number of images nor their "
    "budget; the full test set at N = 100,000, α = 0.001 is assumed [U]"
)


def _build() -> dict[tuple[str, str, float], PublishedCell]:
    table: dict[tuple[str, str, float], PublishedCell] = {}
    for (method, sigma), (row, acr, acc) in _CIFAR10.items():
        radii = _CIFAR10_RADII[sigma]
        table["cifar10", method, sigma] = PublishedCell(
            "cifar10", method, sigma, row, acr, radii, acc, SUN_TABLE2
        )
    for (method, sigma), (row, acr, acc) in _MNIST.items():
        radii = _MNIST_RADII[: len(acc)]
        note = (_MNIST_NOTE,)
        table["mnist", method, sigma] = PublishedCell(
            "mnist", method, sigma, row, acr, radii, acc, MNIST_TABLE, notes=note
        )
    for sigma, acr in _CATRS_MNIST_ACR.items():
        note = (_CATRS_MNIST_NOTE,)
        table["mnist", "catrs", sigma] = PublishedCell(
            "mnist", "catrs", sigma, "CAT-RS", acr, (), (), CATRS_MNIST, notes=note
        )
    for entry in table.values():  # radii and accuracies must pair up (a transcription guard)
        if len(entry.radii) != len(entry.accuracy_percent):
            raise ValueError(f"published cell {entry} pairs {len(entry.radii)} radii with other accuracies")
    return table


PUBLISHED: dict[tuple[str, str, float], PublishedCell] = _build()
"""Every published cell, keyed by (dataset, method, σ)."""


class UnknownCellError(ValueError):
    """A (dataset, method, σ) that is not a published cell; the message names the valid choices."""


def sigma_tag(sigma: float) -> str:
    """``025`` / ``050`` / ``100``: σ as the experiment names spell it."""
    return f"{round(sigma * 100):03d}"


def parse_sigma(text: str | float) -> float:
    """σ from ``0.25``, ``.5``, ``1``, ``0.50``, … (one of :data:`SIGMAS`)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = math.nan
    for sigma in SIGMAS:
        if math.isclose(value, sigma):
            return sigma
    raise UnknownCellError(f"sigma={text!r} is invalid: choose one of {', '.join(str(s) for s in SIGMAS)}")


def cell(dataset: str, method: str, sigma: str | float) -> PublishedCell:
    """The published cell, or :class:`UnknownCellError` naming the bad value and the valid choices."""
    if dataset not in DATASETS:
        raise UnknownCellError(f"dataset={dataset!r} is invalid: choose one of {', '.join(DATASETS)}")
    if method not in METHODS:
        raise UnknownCellError(f"method={method!r} is invalid: choose one of {', '.join(METHODS)}")
    value = parse_sigma(sigma)
    found = PUBLISHED.get((dataset, method, value))
    if found is None:
        methods = [m for m in METHODS if (dataset, m, value) in PUBLISHED]
        raise UnknownCellError(
            f"method={method!r} has no published number for dataset={dataset} sigma={value:g}: choose one of "
            f"{', '.join(methods)}"
        )
    return found


# ---------------------------------------------------------------------------------------------------------
# Comparison of one of our runs with a published cell


def standard_error(p: float, n: int) -> float:
    """Binomial standard error √(p(1−p)/n) of an accuracy p measured on n test images."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else math.nan


def comparison_rows(published: PublishedCell, radius, correct) -> list[dict]:
    """ACR and certified accuracy of our run (per-input ``radius`` and ``correct``) next to the cell's.

    Rows: ``{"metric", "radius", "published", "ours", "se", "difference", "z"}`` with ``difference = ours −
    published`` and ``z = difference / se``. The first row is the ACR (its ``se``: the sample standard
    deviation of correct·radius over √n); then one row per published radius, accuracies as fractions and
    ``se`` the binomial standard error of ours. Both count only the test sample's randomness of our run
    (not seed-to-seed training variation).
    """
    radius, correct = np.asarray(radius, dtype=float), np.asarray(correct, dtype=bool)
    n = int(radius.size)
    per_input = np.where(correct, radius, 0.0)
    acr = average_certified_radius(radius, correct)
    acr_se = float(per_input.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    rows = [_row("ACR", None, published.acr, acr, acr_se)]
    ours = certified_accuracy(radius, correct, published.radii) if published.radii else []
    for r, pub, mine in zip(published.radii, published.accuracy, ours, strict=True):
        rows.append(_row("certified accuracy", r, pub, float(mine), standard_error(float(mine), n)))
    return rows


def _row(metric: str, radius: float | None, published: float, ours: float, se: float) -> dict:
    difference = ours - published
    z = difference / se if se > 0 else (0.0 if difference == 0 else math.copysign(math.inf, difference))
    return {
        "metric": metric,
        "radius": radius,
        "published": published,
        "ours": ours,
        "se": se,
        "difference": difference,
        "z": z,
    }


def published_protocol(published: PublishedCell) -> dict:
    """The protocol values our run must share with the cell (keys of :func:`protocol_differences`): the
    cell's σ, budget and inputs, and for the rest Cohen's CERTIFY as :class:`CertificationSpec` defaults it
    (test split, fixed n, fp32) — the published logs were all made that way."""
    p = published.protocol
    cohen = CertificationSpec(sigma=published.sigma, n0=p.n0, n=p.n, alpha=p.alpha).protocol()
    return {
        "dataset": published.dataset,
        "sigma": published.sigma,
        **{key: cohen[key] for key in ("n0", "n", "alpha")},
        "inputs": _describe_inputs(list(p.indices())),
        **{key: cohen[key] for key in ("split", "mode", "sampling", "precision")},
    }


def _describe_inputs(idx: Sequence[int]) -> str:
    idx = sorted(int(i) for i in idx)
    if not idx:
        return "0 images"
    steps = set(np.diff(idx).tolist()) if len(idx) > 1 else {1}
    pattern = "irregular" if len(steps) != 1 else ("contiguous" if steps == {1} else f"skip {steps.pop()}")
    return f"{len(idx)} images (idx {idx[0]}…{idx[-1]}, {pattern})"


def dataset_of(data: Mapping | None) -> tuple[str | None, str]:
    """(dataset name or None, how it was recognized) from a run's recorded ``data`` description: by name for
    the torchvision modules; an ``npz`` file counts as the dataset whose input shape it has, unverified."""
    if not isinstance(data, Mapping) or not data.get("name"):
        return None, "not recorded"
    name = str(data["name"])
    if name in INPUT_SHAPES:
        return name, name
    shape = tuple(data.get("input_shape") or ())
    for dataset, expected in INPUT_SHAPES.items():
        if shape == expected and int(data.get("num_classes") or 0) == 10:
            return dataset, f"{name} file {data.get('path', '')} with {dataset}'s input shape (not verified)"
    return name, name


def protocol_differences(published: PublishedCell, ours: Mapping) -> dict[str, tuple[str, str]]:
    """``{key: (ours, published)}`` for each protocol value in which our run differs from the cell
    (:func:`~.protocol.differences`, the comparison of runs' protocols, with a value not recorded counting as
    a difference and σ and α compared to rounding).

    ``ours`` holds ``dataset sigma n0 n alpha split mode sampling precision`` (None = not recorded, which
    counts as a difference) and ``idx`` (the certified indices).
    """
    want = published_protocol(published) | {"inputs": tuple(published.protocol.indices())}
    have = {k: ours.get(k) for k in want} | {"inputs": tuple(sorted(int(i) for i in ours.get("idx", ())))}
    found = differences([("ours", have), ("published", want)], want, _same)
    return {key: (_show(values["ours"]), _show(values["published"])) for key, values in found.items()}


def _same(key: str, values: list) -> bool:
    """Whether our value (first) is the published one (second): recorded, and equal (floats to rounding)."""
    mine, value = values
    if mine is None:
        return False
    if isinstance(value, float):
        return math.isclose(float(mine), value, rel_tol=1e-9)
    return mine == value if key == "inputs" else str(mine) == str(value)


def _show(value) -> str:
    if isinstance(value, tuple):  # the inputs' indices
        return _describe_inputs(value)
    return "not recorded" if value is None else (f"{value:g}" if isinstance(value, float) else str(value))
