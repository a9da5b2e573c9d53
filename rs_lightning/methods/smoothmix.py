"""SmoothMix (Jeong, Park, Kim, Lee, Kim & Shin, NeurIPS 2021; jh-jeong/smoothmix)."""

from __future__ import annotations

import torch

from rs_lightning.attacks.smoothmix import smoothmix_pgd
from rs_lightning.smoothing.soft import copies_ce, frozen_eval, smoothed_softmax, soft_kl
from rs_lightning.validation import ConfigError, require_at_least, require_non_negative, require_positive

from .base import SmoothingMethod


class SmoothMix(SmoothingMethod):
    """Self-mixup along the adversarial path of the smoothed classifier (Jeong et al., NeurIPS 2021;
    jh-jeong/smoothmix ``code/train.py``).

    Per chunk of B/m images (``num_chunks = m``) with m noises δ_i ~ N(0, σ²I), drawn once and
    reused for the attack, the clean branch and the mix branch:

    1. Attack (eval mode, frozen params): :func:`~rs_lightning.attacks.smoothmix.smoothmix_pgd` gives the
       clean side x_c (iterate ``mix_step``, within w_e·maxnorm_s of x) and the adversarial end x̂ = x⁽ᵀ⁾.
    2. Clean branch (train mode): L_CE = mean_{i,b} CE(f(x_c,b + δ_i), y_b);
       p̄ = (1/m) Σ_i softmax(f(x_c + δ_i)).
    3. λ_b ~ U[0, 1/2) per sample; x_mix = (1−λ)·x_c + λ·x̂; ŷ = (1−λ)·p̄ + λ·u with u = 1/K.
    4. L_mix = mean_{i,b} c_b·KL(ŷ_b ‖ softmax(f(x_mix,b + δ_i))), c_b = 1[argmax p̄_b = y_b].
    5. loss = L_CE + η·w_e·L_mix, with w_e = min(1, (e+1)/W) at 0-based epoch e.

    As in the reference code, p̄ is **not detached**: L_mix also back-propagates through the soft target into
    the clean branch (``F.kl_div`` differentiates its target). ``mix_step = 1`` is the "one-step adversary"
    variant: x_c = x⁽¹⁾ replaces x in the CE term, p̄, c_b and the mixup. Cost per step: T·m attack
    forward/backward passes + 2·m training forwards.

    Args:
        num_noise_vec: m >= 1, noise draws per image and chunks per loader batch (``--num-noise-vec``).
        num_steps: attack steps T >= 1 (``--num-steps``).
        alpha: attack step size α > 0 in [0,1]-pixel L2 units (``--alpha``; CIFAR: 2σ).
        eta: weight η >= 0 of the mixup loss (``--eta``).
        mix_step: which iterate is the clean side, 0 <= mix_step < T (0: x itself; 1: one-step adversary).
        maxnorm_s: L2 bound of x_c − x before warm-up; ``None`` = α·mix_step (``--maxnorm_s``).
        maxnorm: optional L2 bound of the whole path around x; ``None`` = unbounded (``--maxnorm``).
        warmup: W >= 1 epochs of linear warm-up of η and of the clean-side radius (``--warmup``).
        **kwargs: ``model, sigma, optimizer, scheduler, noise_seed, metadata`` of :class:`SmoothingMethod`.
    """

    def __init__(
        self,
        num_noise_vec: int = 2,
        num_steps: int = 4,
        alpha: float = 0.5,
        eta: float = 5.0,
        mix_step: int = 0,
        maxnorm_s: float | None = None,
        maxnorm: float | None = None,
        warmup: int = 10,
        **kwargs,
    ) -> None:
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        require_at_least("method.num_steps", num_steps, 1)
        require_positive("method.alpha", alpha)
        require_non_negative("method.eta", eta)
        if isinstance(mix_step, bool) or not isinstance(mix_step, int) or not 0 <= mix_step < num_steps:
            raise ConfigError(
                "method.mix_step",
                mix_step,
                f"an integer in [0, num_steps - 1] = [0, {num_steps - 1}]",
                "0 mixes from x itself, 1 from the one-step adversary; the reference silently uses x when "
                "mix_step >= num_steps",
            )
        if maxnorm_s is not None:
            require_non_negative("method.maxnorm_s", maxnorm_s)
        if maxnorm is not None:
            require_positive("method.maxnorm", maxnorm)
        require_at_least("method.warmup", warmup, 1)
        super().__init__(num_chunks=num_noise_vec, **kwargs)
        self.num_noise_vec = int(num_noise_vec)
        self.num_steps = int(num_steps)
        self.alpha = float(alpha)
        self.eta = float(eta)
        self.mix_step = int(mix_step)
        self.maxnorm_s = float(alpha * mix_step if maxnorm_s is None else maxnorm_s)
        self.maxnorm = None if maxnorm is None else float(maxnorm)
        self.warmup_epochs = int(warmup)

    def draw_lambda(self, like: torch.Tensor) -> torch.Tensor:
        """λ_b ~ U[0, 1/2) per sample, from the seeded training-noise generator."""
        gen = self.noise_generator
        return torch.rand(like.shape[0], generator=gen, device=like.device, dtype=like.dtype) / 2

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        m = self.num_noise_vec
        noises = self.draw_noise(x, m)  # (m, B, ...), fixed for the whole step
        w_e = self.warmup(self.warmup_epochs)
        with frozen_eval(self.model):
            x_c, x_adv = smoothmix_pgd(
                self.model,
                x,
                y,
                noises,
                alpha=self.alpha,
                num_steps=self.num_steps,
                mix_step=self.mix_step,
                clean_radius=w_e * self.maxnorm_s,
                maxnorm=self.maxnorm,
            )
        # (m, B, K) in train mode, float32 under bf16-mixed: the CE, p̄ and KL arithmetic is ours, and the
        # gradients of the CE and mixup terms then add up in float32
        logits_c, _ = self.noisy_logits(x_c, noise=noises)
        loss_ce = copies_ce(logits_c, y)
        p_bar = smoothed_softmax(logits_c)  # not detached (reference behaviour)

        lam = self.draw_lambda(x)
        lam_x = lam.view(-1, *([1] * (x.dim() - 1)))
        x_mix = (1 - lam_x) * x_c + lam_x * x_adv
        y_mix = (1 - lam[:, None]) * p_bar + lam[:, None] / p_bar.shape[1]
        kl = soft_kl(self.noisy_logits(x_mix, noise=noises)[0], y_mix)  # (m, B)
        correct = (p_bar.argmax(dim=1) == y).to(kl.dtype)
        loss_mix = (correct * kl).mean()

        self.log("train/smoothmix_ce", loss_ce.detach(), on_step=False, on_epoch=True, batch_size=len(x))
        self.log("train/smoothmix_mix", loss_mix.detach(), on_step=False, on_epoch=True, batch_size=len(x))
        return loss_ce + self.eta * w_e * loss_mix
