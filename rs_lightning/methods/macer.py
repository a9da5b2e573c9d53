"""MACER (Zhai et al., ICLR 2020, arXiv 2001.02378, OpenReview rJx1Na4Fwr; RuntianZ/macer macer.py)."""

from __future__ import annotations

import torch

from rs_lightning.smoothing.noises import gaussian_quantile
from rs_lightning.smoothing.soft import smoothed_nll, smoothed_softmax
from rs_lightning.validation import ConfigError, require_at_least, require_non_negative, require_positive

from .base import SmoothingMethod

DEFER_UNTIL_LR_DROP = "lr_drop"


class MACER(SmoothingMethod):
    """Attack-free maximization of the soft smoothed classifier's certified radius (Zhai et al., ICLR 2020,
    Theorem 1 and §4; RuntianZ/macer ``macer.py``).

    Per loader batch of B images (``num_chunks = 1``: **one** optimizer step, as ``main.py``), k noisy copies
    per image in one train-mode forward pass over B·k samples (BN statistics cover all of them;
    :meth:`~SmoothingMethod.noisy_logits`); z_ij are the logits of copy j of image i:

    - L_C,i = −log((1/k) Σ_j softmax(z_ij)_{y_i} + 1e−10)  (soft-smoothed CE, β = 1);
    - p̂_i = (1/k) Σ_j softmax(β·z_ij); p_A ≥ p_B its top two, c_i its argmax;
      ξ_i = Φ⁻¹(p_A) − Φ⁻¹(p_B) (:func:`~rs_lightning.smoothing.noises.gaussian_quantile`), so (σ/2)·ξ_i
      is the soft radius of Theorem 1;
    - L_R,i = (σ/2)·(γ − ξ_i) if c_i = y_i, ξ_i is finite and ξ_i ≤ γ, else 0 (the hinge of the paper's
      surrogate objective; non-finite ξ are masked, never clamped);
    - L = (1/B) Σ_i (L_C,i + λ·L_R,i): divided by B, not B·k.

    Nothing is detached: gradients reach the logits through both p_A and p_B (the top-2 *indices* and the mask
    are discrete). The mask is decided first and Φ⁻¹ is evaluated on the kept images only, so a masked image
    with p_A = 1 (Φ⁻¹ = ∞) cannot put 0·∞ = NaN into the gradient. λ = 0 (or a deferred epoch) skips the
    robustness term entirely, as the Consistency repo's copy does.

    Args:
        num_noise_vec: k >= 1 noise draws per image (``gauss_num`` / ``--num-noise-vec``).
        beta: inverse temperature β > 0 of the robustness term only (``--beta``).
        gamma: hinge margin γ > 0 on ξ, i.e. the hinge stops at soft radius σγ/2 (``--margin``).
        lbd: weight λ >= 0 of the robustness term (``--lbd``).
        deferred_epochs: ``"lr_drop"``: λ is 0 until the scheduler's first LR drop takes effect — the
            Consistency repo's ``--deferred`` (train_macer.py: λ = 0 while ``epoch <= lr_step_size``, so λ
            switches on with the first drop, at lr 0.001, from epoch 31 of its legacy-stepped StepLR(30) MNIST
            runs, ``EXPERIMENTS.MD``); it keeps that structure on any shortened schedule. An integer n: λ
            is 0 in 0-based epochs e < n; 0 = off.
        **kwargs: ``model, sigma, optimizer, scheduler, noise_seed, metadata`` of :class:`SmoothingMethod`.
    """

    def __init__(
        self,
        num_noise_vec: int = 16,
        beta: float = 16.0,
        gamma: float = 8.0,
        lbd: float = 12.0,
        deferred_epochs: int | str = 0,
        **kwargs,
    ) -> None:
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        require_positive("method.beta", beta)
        require_positive("method.gamma", gamma)
        require_non_negative("method.lbd", lbd)
        if deferred_epochs != DEFER_UNTIL_LR_DROP:
            if isinstance(deferred_epochs, str):
                allowed = f"{DEFER_UNTIL_LR_DROP!r} or an epoch count >= 0"
                raise ConfigError("method.deferred_epochs", deferred_epochs, allowed)
            require_at_least("method.deferred_epochs", deferred_epochs, 0)
        super().__init__(num_chunks=1, **kwargs)
        self.num_noise_vec = int(num_noise_vec)
        self.beta = float(beta)
        self.gamma = float(gamma)
        self.lbd = float(lbd)
        self.deferred_epochs = deferred_epochs if isinstance(deferred_epochs, str) else int(deferred_epochs)

    def on_fit_start(self) -> None:
        if self.deferred_epochs == DEFER_UNTIL_LR_DROP and self.scheduler_factory is None:
            raise ConfigError(
                "method.deferred_epochs",
                DEFER_UNTIL_LR_DROP,
                "an epoch count when optim.scheduler is null",
                "without a scheduler the LR never drops, so lambda would stay 0",
            )

    def robustness_weight(self) -> float:
        """λ now: 0 until the first LR drop (``deferred_epochs="lr_drop"``) or while the 0-based epoch is
        below ``deferred_epochs``, else ``lbd``."""
        if self.deferred_epochs == DEFER_UNTIL_LR_DROP:
            return self.lbd if self.lr_dropped else 0.0
        return 0.0 if self.current_epoch < self.deferred_epochs else self.lbd

    def robustness_terms(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Σ_i L_R,i over the images that pass the mask; ``logits`` is ``(k, B, K)``."""
        p_hat = smoothed_softmax(self.beta * logits)
        top2, classes = p_hat.topk(2, dim=1)
        with torch.no_grad():
            xi = gaussian_quantile(top2[:, 0]) - gaussian_quantile(top2[:, 1])
            keep = (classes[:, 0] == y) & torch.isfinite(xi) & (xi <= self.gamma)
        xi = gaussian_quantile(top2[keep, 0]) - gaussian_quantile(top2[keep, 1])
        self.log("train/macer_active", keep.float().mean(), on_step=False, on_epoch=True, batch_size=len(y))
        return (self.sigma / 2) * (self.gamma - xi).sum()

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        # (k, B, K), float32 under bf16-mixed: in bf16 any p_A > 0.999 rounds to 1 and Phi^-1(p_A) to inf, so
        # such images would leave the hinge (masked) although xi <= gamma; and the soft CE would be bf16.
        logits, _ = self.noisy_logits(x, self.num_noise_vec)
        classification = smoothed_nll(logits, y, floor=0.0, reduction="sum", offset=1e-10)
        lbd = self.robustness_weight()
        if self._trainer is not None:
            self.log("train/macer_lambda", lbd, on_step=False, on_epoch=True, batch_size=len(x))
        robustness = self.robustness_terms(logits, y) if lbd > 0 else classification.new_zeros(())
        b = len(x)
        for name, value in (("classification", classification), ("robustness", robustness)):
            self.log(f"train/macer_{name}", value.detach() / b, on_step=False, on_epoch=True, batch_size=b)
        return (classification + lbd * robustness) / b
