"""Gaussian noise on the 8-bit pixel lattice: certificates that hold in floating point.

Voráček & Hein, ICLR 2023, *Sound Randomized Smoothing in Floating-Point Arithmetic*
(github.com/vvoracek/Sound-Randomized-Smoothing), show that float Gaussian noise voids Cohen's certificate: a
base classifier can read the clean input from the low bits of fl(x + δ). Their remedy, built here: for inputs
on the grid x = k/255, draw δ = j/255 with

    P(j) = Φ((j + ½)/(255σ)) − Φ((j − ½)/(255σ)),

the law of round(255ε) for ε ~ N(0, σ²). Then x + δ has the law of round₂₅₅(x + ε), so smoothing f with this
noise at x is the continuous Gaussian smoothing of g = f∘round₂₅₅ at x, and Cohen et al.'s radius σΦ⁻¹(p_A)
holds for it exactly, against every perturbation on or off the grid. The model sees (k + j)/255, computed from
the integer sum: a deterministic function of the lattice point, so precision (bf16, channels_last) is part of
the base classifier and no longer of the certificate's soundness.

Sampling is integer arithmetic. j is drawn by comparing a uniform 60-bit integer U with the integer edges
E_i = ⌈2⁶⁰·F(i)⌉ of the CDF F of j, computed with mpmath at 50 digits (an edge within 10⁻²⁰ of an integer is
recomputed at 120), by binary search (``torch.searchsorted``: ~12 comparisons per coordinate at σ = 0.5,
against the reference's comparison with every threshold). The table covers |j| ≤ J, J = ⌈10·255σ⌉ + 1; a U
outside it is *flagged*.

The stated rule that keeps the guarantee: the sampled law Q (per coordinate: the table's values and "flagged")
differs from the exact lattice law P (its tails lumped into "flagged") by a total variation τ(σ) = ½Σ|Q − P|,
computed exactly here (about 10⁻¹⁶). A draw with any flagged coordinate votes for no class. With d
coordinates, the product laws differ by at most d·τ in total variation, so for every class A

    P(f(x + δ) = A) ≥ Q(f(x + δ) = A, no coordinate flagged) − d·τ,

and the certificate is σΦ⁻¹(p − d·τ) for a lower bound p on what the draws estimate (:class:`GaussianLattice`
radii, which is why they need d): in L2, and by the inclusion of balls in L1 (the same radius, ‖δ‖₂ ≤ ‖δ‖₁)
and L∞ (divided by √d), as :class:`~.gaussian.Gaussian` states them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import mpmath
import numpy as np
import torch
from scipy.stats import norm as normal

from .base import Noise, dim_of
from .gaussian import Gaussian

LEVELS = 255
"""Steps per unit of the pixel grid: x = k/255, as every 8-bit image dataset stores it."""
BITS = 60
"""Bits of the uniform integer compared with the edges (2⁶⁰ < 2⁶³: int64 on every device)."""
BUCKET_BITS = 16
"""U's top bits, drawn first: they index the bucket table (2¹⁶ float32 entries, 256 KiB per σ and device)."""
TAIL_SDS = 10
"""The table covers ±(10·255σ + 1) steps: beyond it P's tail is below Φ(−10) ≈ 8·10⁻²⁴ per coordinate."""


@dataclass(frozen=True)
class LatticeTable:
    """The sampling table at one σ: ``edges`` (int64, 2J + 2 values: E_{−J−1}, …, E_J), the half-width J
    and the total variation τ between the sampled and the exact law (module docstring).

    ``buckets`` makes the search cheap without changing the law: U's top :data:`BUCKET_BITS` bits name one of
    2¹⁶ equal ranges of U, and for a range that holds no edge every U in it has the same offset, stored there
    (float32, exact; :data:`AMBIGUOUS` where an edge falls inside). So U is drawn in two parts: its top bits
    for every coordinate, and its other 44 bits only where the bucket is ambiguous (about 1 % of coordinates
    at σ = 0.25), which are then located among the edges by binary search.
    """

    edges: torch.Tensor
    half_width: int
    tv: float
    buckets: torch.Tensor = field(init=False, compare=False, repr=False)
    _on_device: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        width = 2 ** (BITS - BUCKET_BITS)
        starts = torch.arange(2**BUCKET_BITS, dtype=torch.int64) * width
        first = torch.searchsorted(self.edges, starts, right=True)
        last = torch.searchsorted(self.edges, starts + (width - 1), right=True)
        offsets = _offsets_of_slots(first, self.half_width, self.edges.numel())
        searched = (first != last) | (offsets == FLAGGED)  # a flagged U is found by the search, and counted
        offsets = offsets.masked_fill_(searched, AMBIGUOUS).to(torch.float32)
        object.__setattr__(self, "buckets", offsets)

    def on(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """``(edges, buckets)`` on ``device`` (copied once per device)."""
        key = str(torch.device(device))
        if key not in self._on_device:
            self._on_device[key] = (self.edges.to(device), self.buckets.to(device))
        return self._on_device[key]


def _offsets_of_slots(slot: torch.Tensor, half_width: int, num_edges: int) -> torch.Tensor:
    """Offset j (int32) of each search slot among the edges; slot 0 (below E_{−J−1}) and slot 2J + 2 (at or
    above E_J) are :data:`FLAGGED`."""
    j = (slot - (half_width + 1)).to(torch.int32)
    return j.masked_fill_((slot == 0) | (slot == num_edges), FLAGGED)


def _cdf_edges(sigma: float, half_width: int, digits: int) -> list[mpmath.mpf]:
    """2⁶⁰·F(k) for k = −J−1, …, J at ``digits`` decimal digits, F(k) = Φ((k + ½)/(255σ))."""
    with mpmath.workdps(digits):
        s = mpmath.mpf(LEVELS) * mpmath.mpf(sigma)
        scale = mpmath.mpf(2) ** BITS
        return [
            scale * mpmath.ncdf((k + mpmath.mpf(1) / 2) / s) for k in range(-half_width - 1, half_width + 1)
        ]


def _ceilings(values: list[mpmath.mpf], digits: int) -> list[int] | None:
    """⌈v⌉ of each value, or None if one lies within 10⁻²⁰ of an integer (not decided at this precision)."""
    out = []
    with mpmath.workdps(digits):
        for v in values:
            if abs(v - mpmath.nint(v)) < mpmath.mpf("1e-20"):
                return None
            out.append(int(mpmath.ceil(v)))
    return out


@lru_cache(maxsize=16)
def lattice_table(sigma: float) -> LatticeTable:
    """The table at ``sigma`` (cached per σ): edges computed with mpmath, τ computed exactly from them."""
    half_width = math.ceil(TAIL_SDS * LEVELS * float(sigma)) + 1
    for digits in (50, 120):
        exact = _cdf_edges(sigma, half_width, digits)
        edges = _ceilings(exact, digits)
        if edges is not None:
            break
    else:
        raise ArithmeticError(f"a lattice edge at sigma={sigma} is within 1e-20 of an integer at 120 digits")
    with mpmath.workdps(digits):
        scale = mpmath.mpf(2) ** BITS
        # per value j in [−J, J]: Q(j) = (E_j − E_{j−1})/2⁶⁰ against P(j) = F(j) − F(j−1); and "flagged":
        # Q = (E_{−J−1} + 2⁶⁰ − E_J)/2⁶⁰ against P's two tails F(−J−1) + 1 − F(J)
        gaps = sum(abs((edges[i] - edges[i - 1]) - (exact[i] - exact[i - 1])) for i in range(1, len(edges)))
        flagged = abs((edges[0] + 2**BITS - edges[-1]) - (exact[0] + scale - exact[-1]))
        tv = float((gaps + flagged) / scale / 2)
    return LatticeTable(torch.tensor(edges, dtype=torch.int64), half_width, tv)


def exact_pmf(sigma: float, values: np.ndarray) -> np.ndarray:
    """P(j) = Φ((j + ½)/(255σ)) − Φ((j − ½)/(255σ)) in float64 (scipy), for tests and plots."""
    s = LEVELS * float(sigma)
    j = np.asarray(values, dtype=np.float64)
    return normal.cdf((j + 0.5) / s) - normal.cdf((j - 0.5) / s)


def grid_levels(x: torch.Tensor) -> torch.Tensor:
    """The pixel levels k of an input on the grid x = k/255 (int32); ValueError for an input off the grid
    (a float dataset, a resized crop), which is never rounded here: quantize it explicitly first."""
    scaled = x.to(torch.float64) * LEVELS
    levels = scaled.round()
    off = (scaled - levels).abs().max().item() if x.numel() else 0.0
    if off > OFF_GRID_TOLERANCE:
        raise ValueError(
            f"an input is off the 8-bit pixel grid k/255 (a pixel is {off:.3g} of a level away): lattice "
            "noise certifies inputs on the grid only; quantize the data explicitly (certify.py quantize=true)"
        )
    return levels.to(torch.int32)


OFF_GRID_TOLERANCE = 1e-3
"""How far (in levels) x·255 may lie from an integer and still be the level k: float32(k/255)·255 is within
1e-5 of k, a pixel of any other dataset (e.g. v/16) at least 0.06 away."""


class GaussianLattice(Noise):
    """Gaussian noise rounded to the 8-bit pixel lattice (module docstring): sound in floating point."""

    name = "gaussian_lattice"
    norms = ("l2", "l1", "linf")  # L1 and L∞ by the inclusion of balls, as for float Gaussian noise
    grid_inputs = True

    def needs_dim(self, norm: str) -> bool:
        return True  # the radius gives up d·τ of p_A

    def draw(
        self, shape, generator: torch.Generator, device, sigma: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Lattice offsets j of ``shape`` as float32 (exact integers) and the flat positions of the flagged
        coordinates (their j is 0). One uniform 60-bit integer U per coordinate, in two parts
        (:class:`LatticeTable`): its top 16 bits pick a bucket; where an edge falls inside it, its low 44
        bits are drawn and U is located among the edges by binary search."""
        table = lattice_table(float(sigma))
        edges, buckets = table.on(device)
        top = torch.randint(0, 2**BUCKET_BITS, shape, generator=generator, device=device, dtype=torch.int32)
        j = buckets.index_select(0, top.flatten())
        inside = (j == AMBIGUOUS).nonzero().flatten()
        flagged = inside[:0]
        if inside.numel():
            low = torch.randint(
                0, 2 ** (BITS - BUCKET_BITS), inside.shape, generator=generator, device=device
            )
            u = (top.flatten()[inside].to(torch.int64) << (BITS - BUCKET_BITS)) | low
            offsets = _offsets_of_slots(
                torch.searchsorted(edges, u, right=True), table.half_width, edges.numel()
            )
            flagged = inside[offsets == FLAGGED]
            j[inside] = offsets.masked_fill_(offsets == FLAGGED, 0).to(torch.float32)
        return j.view(shape), flagged

    def offsets(self, shape, generator: torch.Generator, device, sigma: float) -> torch.Tensor:
        """The offsets of :meth:`draw` as int32, a flagged coordinate :data:`FLAGGED`."""
        j, flagged = self.draw(shape, generator, device, sigma)
        j = j.to(torch.int32)
        j.view(-1)[flagged] = FLAGGED
        return j

    def sample(self, shape, generator, device, dtype=torch.float32, out=None):
        raise TypeError(
            "lattice noise has no standard draws: its law depends on sigma (use offsets or scaled)"
        )

    def scaled(self, shape, generator, device, dtype, sigma, out=None):
        """j/255 (training adds it to inputs on the grid; a flagged coordinate, once in ~10¹⁶, adds 0)."""
        drawn = self.draw(shape, generator, device, sigma)[0].div_(LEVELS)
        return drawn.to(dtype) if out is None else out.copy_(drawn)

    def perturb(self, x, rows, generator, sigma, out=None):
        """(k + j)/255, the sum of integers exact in float32, then cast to ``x``'s dtype; a copy with a
        flagged coordinate does not count (the stated rule of the module docstring)."""
        j, flagged = self.draw((rows, *x.shape), generator, x.device, sigma)
        levels = grid_levels(x).to(torch.float32)
        direct = out is not None and out.dtype == torch.float32
        inputs = torch.add(j, levels, out=out if direct else j).div_(LEVELS)
        if not direct:
            inputs = inputs.to(x.dtype) if out is None else out.copy_(inputs)
        if not flagged.numel():
            return inputs, None
        counted = torch.ones(rows, dtype=torch.bool, device=x.device)
        counted[flagged // x.numel()] = False
        return inputs, counted

    def radius(self, p, lam, norm, dim):
        scale = Gaussian.radius_scale(lam, norm, dim)
        return scale * normal.ppf(np.clip(p - self.slack(lam, dim), 0.5, 1.0))

    def threshold(self, r, lam, norm, dim):
        return normal.cdf(r / Gaussian.radius_scale(lam, norm, dim)) + self.slack(lam, dim)

    def radius_at_tail(self, q, lam, norm, dim):
        scale = Gaussian.radius_scale(lam, norm, dim)
        return scale * normal.isf(np.clip(q + self.slack(lam, dim), 0.0, 0.5))

    @staticmethod
    def slack(sigma: float, dim: int | None) -> float:
        """d·τ: what the certificate gives up of p_A for the sampled law's distance from the exact one."""
        return dim_of(dim) * lattice_table(float(sigma)).tv


FLAGGED = int(np.iinfo(np.int32).min)
"""The offset of a flagged coordinate (outside the table; the draw votes for no class)."""
AMBIGUOUS = -(2**24)
"""A bucket with an edge inside (its U are searched among the edges): exact in float32, beyond every J."""
