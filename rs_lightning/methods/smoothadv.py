"""SmoothAdv: adversarial training of the soft smoothed classifier (Salman et al., NeurIPS 2019)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from rs_lightning.attacks.smoothadv import smoothadv_ddn, smoothadv_pgd, smoothadv_pgd_nograd
from rs_lightning.smoothing.soft import copies_ce
from rs_lightning.validation import ConfigError, require_at_least, require_open_unit, require_positive

from .base import SmoothingMethod

ATTACKS = ("pgd", "ddn")


class SmoothAdv(SmoothingMethod):
    """min_theta E max_{||x'-x||<=eps} l_adv(x'), l_adv = -log((1/m) sum_j F(x' + delta_j)_y) (Salman et al.
    2019, §3 Eq. (S) and Alg. 1; Hadisalman/smoothing-adversarial code/train_pgd.py).

    Step semantics (per loader batch of B images, ``m = num_noise_vec``):

    - ``multi_noise: true`` (``--train-multi-noise``): ``num_chunks = m``, so m optimizer steps per loader
      batch, each on B' = ⌊B/m⌋ images. Per chunk: draw m noises per image (``(m, B', ...)``), attack x
      with them (eval mode, frozen parameters), then L = (1/(B'm)) sum_{i,j} CE(f(x_hat_i + delta_ij), y_i)
      with the **same** delta_ij, x_hat a constant (train mode).
    - ``multi_noise: false``: one step per loader batch. The batch is attacked in m chunks of ⌈B/m⌉ images
      (each with its own m draws per image, as the reference's step 2.3/2.6; attacks are per image, so the
      chunking only bounds memory), and L = (1/B) sum_i CE(f(x_hat_i + delta_i1), y_i) uses draw 1 only.

    The radius is warmed up: eps_e = min(eps, (e+1) eps / W) at 0-based epoch e (W = ``warmup``; W = 1: none),
    logged as ``train/epsilon``. PGD: T steps of size 2 eps_e / T from Delta = 0. DDN: T steps, initial norm
    eps_e (train_pgd.py overwrites ``--init-norm-DDN`` with the warmed-up eps every epoch). ``no_grad``: PGD
    with the gradient-free direction (1/m) sum_j -F(x'+delta_j)_y delta_j (m >= 2 only).

    Args:
        epsilon: attack radius eps in [0,1]-pixel L2 units (the reference's command-line value / 256).
        num_steps: attack steps T.
        num_noise_vec: noise draws m per image, shared by the attack and the loss.
        multi_noise: train on all m noisy copies (True) or on the first only (False).
        warmup: W, epochs of linear eps warm-up.
        attack: ``"pgd"`` or ``"ddn"``.
        no_grad: the gradient-free PGD variant.
        ddn_gamma: DDN's norm update factor gamma.
    """

    def __init__(
        self,
        *args,
        epsilon: float = 0.25,
        num_steps: int = 10,
        num_noise_vec: int = 2,
        multi_noise: bool = True,
        warmup: int = 10,
        attack: str = "pgd",
        no_grad: bool = False,
        ddn_gamma: float = 0.05,
        **kwargs,
    ) -> None:
        require_positive("method.epsilon", epsilon)
        require_at_least("method.num_steps", num_steps, 1)
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        require_at_least("method.warmup", warmup, 1)
        require_open_unit("method.ddn_gamma", ddn_gamma)
        for key, flag in (("method.multi_noise", multi_noise), ("method.no_grad", no_grad)):
            if not isinstance(flag, bool):
                raise ConfigError(key, flag, "true or false")
        attack = attack.lower() if isinstance(attack, str) else attack
        if attack not in ATTACKS:
            raise ConfigError("method.attack", attack, f"one of {ATTACKS}")
        if no_grad and attack != "pgd":
            raise ConfigError(
                "method.no_grad", no_grad, "false with attack=ddn", "no-grad exists for PGD only"
            )
        if no_grad and num_noise_vec < 2:
            raise ConfigError(
                "method.no_grad", no_grad, "false when num_noise_vec = 1", "no-grad PGD needs m >= 2 draws"
            )
        kwargs.pop("num_chunks", None)
        super().__init__(*args, num_chunks=num_noise_vec if multi_noise else 1, **kwargs)
        self.epsilon = float(epsilon)
        self.num_steps = int(num_steps)
        self.num_noise_vec = int(num_noise_vec)
        self.multi_noise = multi_noise
        self.warmup_epochs = int(warmup)
        self.attack = attack
        self.no_grad = no_grad
        self.ddn_gamma = float(ddn_gamma)

    @property
    def current_epsilon(self) -> float:
        """eps_e = min(eps, (e + 1) eps / W) at the current 0-based epoch e."""
        return self.epsilon * self.warmup(self.warmup_epochs)

    def adversarial_examples(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """x_hat for clean ``x`` (B, ...) and the draws ``noise`` (m, B, ...), at the current radius."""
        eps, gen = self.current_epsilon, self.noise_generator
        if self.attack == "ddn":
            return smoothadv_ddn(
                self.model,
                x,
                y,
                noise,
                eps,
                self.num_steps,
                init_norm=eps,
                gamma=self.ddn_gamma,
                generator=gen,
            )
        attack = smoothadv_pgd_nograd if self.no_grad else smoothadv_pgd
        return attack(self.model, x, y, noise, eps, self.num_steps, generator=gen)

    def _attacked_copies(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(x_hat, noise (m, B, ...)) with m fresh draws per image."""
        noise = self.draw_noise(x, self.num_noise_vec)
        return self.adversarial_examples(x, y, noise), noise

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        self.log("train/epsilon", self.current_epsilon, on_step=False, on_epoch=True, batch_size=len(x))
        m = self.num_noise_vec
        if self.multi_noise:
            x_adv, noise = self._attacked_copies(x, y)
            logits, _ = self.noisy_logits(x_adv, noise=noise)  # (m, B', K), train mode
            return copies_ce(logits, y)
        x_adv, first = [], []
        for xc, yc in zip(x.split(math.ceil(len(x) / m)), y.split(math.ceil(len(x) / m)), strict=True):
            x_hat, noise = self._attacked_copies(xc, yc)
            x_adv.append(x_hat)
            first.append(noise[:1])  # draw 1 of each image
        logits, _ = self.noisy_logits(torch.cat(x_adv), noise=torch.cat(first, dim=1))
        return F.cross_entropy(logits[0], y)
