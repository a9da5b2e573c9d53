"""Consistency regularization (Jeong & Shin, NeurIPS 2020; jh-jeong/smoothing-consistency)."""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F

from rs_lightning.attacks.smoothadv import smoothadv_pgd
from rs_lightning.smoothing.certificate import NOISES
from rs_lightning.smoothing.soft import copies_ce, smoothed_softmax, soft_kl
from rs_lightning.validation import ConfigError, require_at_least, require_non_negative, require_positive

from .base import SmoothingMethod

LOSSES = ("default", "xent", "kl", "mse")


class Consistency(SmoothingMethod):
    """Gaussian augmentation plus consistency of the m noisy predictions (Jeong & Shin, NeurIPS 2020;
    jh-jeong/smoothing-consistency ``code/consistency.py``, ``code/train_consistency.py``). The loss does not
    assume the Gaussian form: ``noise=laplace|uniform`` draws the m copies from that noise.

    Step semantics (train_consistency.py): a loader batch is split into ``num_chunks = m`` chunks of B' = B/m
    images, one optimizer step each. Per chunk, m noises δ_1..δ_m (each shaped like the chunk) are drawn and
    the copies are concatenated **noise-major**, [x + δ_1; x + δ_2; …], for one train-mode forward pass.
    With p_ij = softmax(f(x_i + δ_ij)) and p̄_i = (1/m) Σ_j p_ij (**not** detached: the KL target gets
    gradients too), the paper's objective with ``loss='default'`` is

        L = (1/(B'm)) Σ_{i,j} CE(f(x_i + δ_ij), y_i) + (1/B') Σ_i [λ·(1/m) Σ_j KL(p̄_i ‖ p_ij) + η·H(p̄_i)]

    with KL(p̄‖p_j) = Σ_c p̄_c (log p̄_c − log p_jc) (mean ‖ individual) and the entropy **of the mean**
    H(p̄) = −Σ_c p̄_c log max(p̄_c, 1e−20). The other ``loss`` variants replace the bracket by
    ``xent``: λ·(KL + H) = λ·(1/m) Σ_j CE(p̄, p_j); ``kl``: λ·KL; ``mse``: λ·‖p_i2 − p_i1‖² (m = 2 only).
    η is used by ``default`` only. The CE term always runs over all m copies.

    **SmoothAdv + Consistency** (``train_consistency.py --adv-training``, ``EXPERIMENTS.MD``): with
    ``epsilon`` set, x is replaced by the SmoothAdv-PGD point x̂ (eval mode, frozen parameters, ``num_steps``
    steps of 2ε_e/T, Consistency's step → project → clamp order) computed with the **same** m noises that
    enter the loss; ε is warmed up linearly over ``warmup`` epochs as in SmoothAdv.

    Args:
        num_noise_vec: m >= 2 noise draws per image = chunks per loader batch (``--num-noise-vec``; the
            repo's default m = 1 silently disables the KL term, so it is refused).
        lbd: weight λ >= 0 of the consistency term (``--lbd``).
        eta: weight η >= 0 of the entropy of p̄ (``--eta``; ``loss='default'`` only).
        loss: ``default`` | ``xent`` | ``kl`` | ``mse`` (``consistency_loss(..., loss=)``).
        epsilon: SmoothAdv radius in [0,1]-pixel L2 units (CLI value / 256), or None for Gaussian noise only.
        num_steps: PGD steps T of the SmoothAdv variant.
        warmup: epochs W of linear ε warm-up of the SmoothAdv variant.
        **kwargs: ``model, sigma, optimizer, scheduler, noise_seed, metadata`` of :class:`SmoothingMethod`.
    """

    noises = NOISES

    @classmethod
    def check_noise_settings(cls, noise: str, settings: Mapping) -> None:
        """SmoothAdv + Consistency (``epsilon`` set) only with Gaussian noise: its attack is an L2 PGD, while
        Laplace and uniform noise certify L1 radii (Yang et al., ICML 2020)."""
        epsilon = settings.get("epsilon")
        if epsilon is not None and noise != "gaussian":
            raise ConfigError(
                "method.epsilon",
                epsilon,
                f"null with noise={noise}",
                "its SmoothAdv attack is an L2 PGD, while that noise certifies L1 radii",
            )

    def __init__(
        self,
        num_noise_vec: int = 2,
        lbd: float = 10.0,
        eta: float = 0.5,
        loss: str = "default",
        epsilon: float | None = None,
        num_steps: int = 10,
        warmup: int = 10,
        **kwargs,
    ) -> None:
        if epsilon is not None:
            require_positive("method.epsilon", epsilon)
        require_at_least("method.num_steps", num_steps, 1)
        require_at_least("method.warmup", warmup, 1)
        require_at_least("method.num_noise_vec", num_noise_vec, 2)
        require_non_negative("method.lbd", lbd)
        require_non_negative("method.eta", eta)
        if loss not in LOSSES:
            raise ConfigError("method.loss", loss, f"one of {', '.join(LOSSES)}")
        if loss == "mse" and num_noise_vec != 2:
            raise ConfigError(
                "method.num_noise_vec",
                num_noise_vec,
                "2 with method.loss=mse",
                "mse compares p_2 with p_1 only",
            )
        self.check_noise_settings(kwargs.get("noise", "gaussian"), {"epsilon": epsilon})
        super().__init__(num_chunks=num_noise_vec, **kwargs)
        self.num_noise_vec = int(num_noise_vec)
        self.lbd = float(lbd)
        self.eta = float(eta)
        self.loss = loss
        self.epsilon = None if epsilon is None else float(epsilon)
        self.num_steps, self.warmup_epochs = int(num_steps), int(warmup)

    def attacked(self, x: torch.Tensor, y: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """The base point of the copies: ``x``, or with ``epsilon`` set SmoothAdv-PGD's x̂ computed with the
        same noises ``(m, B', ...)`` that enter the loss."""
        if self.epsilon is None:
            return x
        eps = self.epsilon * self.warmup(self.warmup_epochs)
        self.log("train/epsilon", eps, on_step=False, on_epoch=True, batch_size=len(x))
        return smoothadv_pgd(
            self.model, x, y, noise, eps, self.num_steps, clamp_first=False, generator=self.noise_generator
        )

    def consistency_terms(self, logits: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Per-image ``(KL, H, MSE)`` from logits ``(m, B', K)``: mean_j KL(p̄‖p_j), H(p̄), ‖p_2 − p_1‖²."""
        p_bar = smoothed_softmax(logits)
        kl = soft_kl(logits, p_bar).mean(0)
        entropy = -(p_bar * torch.log(p_bar.clamp_min(1e-20))).sum(-1)
        p = F.log_softmax(logits, dim=-1).exp()
        mse = (p[1] - p[0]).pow(2).sum(-1)
        return kl, entropy, mse

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        m, b = self.num_noise_vec, len(x)
        noise = self.draw_noise(x, m)  # δ_1..δ_m, (m, B', ...)
        # (m, B', K), float32 under bf16-mixed: the CE and consistency gradients then add up in float32
        logits, _ = self.noisy_logits(self.attacked(x, y, noise), noise=noise)
        cross_entropy = copies_ce(logits, y)
        kl, entropy, mse = self.consistency_terms(logits)
        if self.loss == "default":
            consistency = self.lbd * kl + self.eta * entropy
        elif self.loss == "xent":
            consistency = self.lbd * (kl + entropy)
        elif self.loss == "kl":
            consistency = self.lbd * kl
        else:
            consistency = self.lbd * mse
        for name, value in (("ce", cross_entropy), ("kl", kl), ("entropy", entropy), ("mse", mse)):
            if name != "mse" or self.loss == "mse":
                self.log(
                    f"train/consistency_{name}",
                    value.detach().mean(),
                    on_step=False,
                    on_epoch=True,
                    batch_size=b,
                )
        return cross_entropy + consistency.mean()
