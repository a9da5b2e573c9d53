"""The noise contract: one class per smoothing distribution, with everything that depends on it.

A :class:`Noise` owns its scale at per-coordinate standard deviation σ (Yang et al., ICML 2020, *Randomized
Smoothing of All Shapes and Sizes*, compare noises at equal σ), its standard draws (scale λ = 1) from a seeded
generator, and, for each norm it certifies, the radius a lower bound p on p_A certifies (with p_B ≤ 1 − p),
its inverse (the threshold p_A must reach), the radius at p = 1 − q computed from the tail q, and the log of
the threshold. Training draws its noise here and certification draws the same (one object per noise).

A subclass that sets ``name`` registers itself (:data:`NOISE_CLASSES`), so a new noise is one class: a file in
this package (the package imports each of its modules) or the user's own module imported before the run.
Radii are only asked for p in (½, 1] and tails in [0, ½): :class:`~..certificate.Certificate` clips and puts
0 where CERTIFY abstains.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

NOISE_CLASSES: dict[str, type[Noise]] = {}
"""Every noise by its ``name`` (the value of ``noise=``), in definition order."""


class Noise:
    """A smoothing distribution with independent coordinates, at per-coordinate standard deviation σ."""

    name: ClassVar[str]
    norms: ClassVar[tuple[str, ...]]
    """The norms it certifies; the first is its own (the default ``norm=``)."""
    scale_over_sigma: ClassVar[float] = 1.0
    """λ / σ: the scale parameter that gives standard deviation σ per coordinate."""
    grid_inputs: ClassVar[bool] = False
    """Whether it certifies only inputs on the 8-bit pixel grid k/255 (certify.py refuses others)."""

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            NOISE_CLASSES[cls.name] = cls

    def __eq__(self, other) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def scale(self, sigma: float) -> float:
        """λ at per-coordinate standard deviation ``sigma``."""
        return self.scale_over_sigma * float(sigma)

    def sample(
        self, shape, generator: torch.Generator, device, dtype=torch.float32, out=None
    ) -> torch.Tensor:
        """Standard draws (λ = 1) of ``shape`` from ``generator`` (:meth:`scaled` multiplies by λ)."""
        raise NotImplementedError

    def scaled(
        self, shape, generator: torch.Generator, device, dtype, sigma: float, out=None
    ) -> torch.Tensor:
        """The noise itself at ``sigma``, in input units (what training adds to its inputs)."""
        return self.sample(shape, generator, device, dtype, out=out).mul_(self.scale(sigma))

    def perturb(
        self, x: torch.Tensor, rows: int, generator: torch.Generator, sigma: float, out=None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``rows`` noisy copies of one clean input ``x`` (the base classifier's inputs, into ``out`` if
        given) and which of them count (None: all). A copy that does not count votes for no class."""
        drawn = self.scaled((rows, *x.shape), generator, x.device, x.dtype, sigma, out=out)
        return drawn.add_(x), None

    def needs_dim(self, norm: str) -> bool:
        """Whether the radius in ``norm`` depends on the input dimension d = C·H·W."""
        return norm == "linf"

    def radius(self, p: np.ndarray, lam: float, norm: str, dim: int | None) -> np.ndarray:
        """The ``norm`` radius certified by p_A ≥ ``p`` (p in (½, 1]) at scale ``lam``."""
        raise NotImplementedError

    def threshold(self, r: np.ndarray, lam: float, norm: str, dim: int | None) -> np.ndarray:
        """The p_A a lower bound must reach to certify radius ``r`` (above 1 where none can)."""
        raise NotImplementedError

    def radius_at_tail(self, q: np.ndarray, lam: float, norm: str, dim: int | None) -> np.ndarray:
        """:meth:`radius` at p = 1 − ``q`` (q in [0, ½)); override where 1 − q loses q's precision."""
        return self.radius(1 - q, lam, norm, dim)

    def log_threshold(self, r: np.ndarray, lam: float, norm: str, dim: int | None) -> np.ndarray:
        """ln :meth:`threshold`; override where the threshold is within 1e-16 of 1."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(self.threshold(r, lam, norm, dim))


def noise_of(name: str) -> Noise:
    """The noise named ``name`` (one of :data:`NOISE_CLASSES`)."""
    return NOISE_CLASSES[name]()


def dim_of(dim: int | None) -> int:
    """``dim`` checked: the radii that depend on the input dimension d = C·H·W (the L∞ ones) need it."""
    if dim is None or int(dim) < 1:
        raise ValueError(f"an L∞ radius needs the input dimension d = C*H*W >= 1, got dim={dim!r}")
    return int(dim)


def uniform_float32(shape, generator: torch.Generator, device) -> torch.Tensor:
    """U[0, 1) draws in float32, for noises transformed from uniforms (in bf16 a uniform draw is 0 once in
    256, and ln 0 = −inf); the caller casts the result."""
    return torch.rand(shape, generator=generator, device=device, dtype=torch.float32)


def cast(drawn: torch.Tensor, dtype, out) -> torch.Tensor:
    return drawn.to(dtype) if out is None else out.copy_(drawn)
