"""CAT-RS: confidence-aware training of smoothed classifiers (Jeong, Kim & Shin, AAAI 2023).

Step semantics of alinlab/smoothing-catrs ``code/train_catrs.py`` (``train``, ``KL_PGD``) and
``EXPERIMENTS.MD``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from rs_lightning.attacks.noise_space import kl_noise_pgd
from rs_lightning.smoothing.soft import copy_rows, frozen_eval, soft_kl
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .base import SmoothingMethod

MAKE_SOFT_LABELS = (
    "make it with `python soft_labels.py checkpoint=<Gaussian sigma=0.25 checkpoint> output=<file>.npy` "
    "(alinlab/smoothing-catrs code/smooth_prediction.py)"
)


def load_soft_labels(path: str | Path, num_train: int, num_classes: int) -> np.ndarray:
    """Memory-map the [N_train, K] soft labels; a wrong shape is a ConfigError on ``method.soft_labels``."""
    expected = f"a float .npy array of shape [{num_train}, {num_classes}] (training images x classes)"
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ConfigError("method.soft_labels", str(path), expected, f"{err}; {MAKE_SOFT_LABELS}") from err
    if array.shape != (num_train, num_classes) or not np.issubdtype(array.dtype, np.floating):
        raise ConfigError(
            "method.soft_labels",
            str(path),
            expected,
            f"{path} holds {array.dtype} of shape {list(array.shape)}, expected [{num_train}, {num_classes}] "
            f"for this training set; {MAKE_SOFT_LABELS}",
        )
    return array


def bottom_k_sum(losses: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per image b, the sum of the ``k[b]`` smallest of its M copies' losses ``losses[:, b]`` (``(M, B)``);
    gradient only into those."""
    ordered, _ = losses.sort(dim=0)
    keep = torch.arange(losses.shape[0], device=losses.device)[:, None] < k[None, :]
    return (ordered * keep).sum(dim=0)


class CATRS(SmoothingMethod):
    """CAT-RS (Jeong, Kim & Shin, AAAI 2023): sample-wise control of the smoothed-classifier target.

    Per chunk of B/M images x with labels y and soft labels p_b (``num_chunks = M``),
    M noises δ_i ~ N(0, σ²I) (alinlab/smoothing-catrs ``code/train_catrs.py``):

    1. z_i = f(x + δ_i) in train mode; p̂_b = (1/M) Σ_i 1[argmax z_i,b = y_b] (or p_b[y_b] with
       ``confidence_mask``).
    2. K_b ~ Binomial(M, p̂_b) from the rank's seeded noise generator, K_b ← max(K_b, 1).
    3. L^low_b = (1/M) Σ of the K_b smallest CE(z_i,b, y_b) — divided by M, not K_b; unselected copies get no
       gradient.
    4. δ* = :func:`~rs_lightning.attacks.noise_space.kl_noise_pgd` from the same δ_i (eval mode, frozen
       parameters): T steps of 2ε/T ascending KL(p_b ‖ softmax f(x + δ)), ε-ball around δ_i, then per-sample
       mean/RMS re-standardisation.
    5. L^high_b = max_i KL(p_b ‖ softmax f(x + δ*_i)) in train mode.
    6. loss = mean_b [L^low_b + λ·1[K_b = M]·L^high_b].

    p_b is the pre-trained σ = 0.25 Gaussian model's hard-prediction frequencies on training image b
    (``code/smooth_prediction.py``; here ``soft_labels.py``), indexed by dataset index
    (``needs_sample_index``). Training without them is refused unless ``allow_onehot=True`` asks for our
    **deviation**: p_b = the one-hot label (so KL = CE), which is not the paper's method (it requires the
    preprocessing pass).

    Args:
        num_noise_vec: M, noise draws per image and chunks per loader batch (>= 1).
        epsilon: ε, L2 radius of the noise search around δ_i, [0,1]-pixel units (reference ``--epsilon/256``).
        num_steps: T, attack steps (step length 2ε/T).
        lbd: λ >= 0, weight of L^high.
        soft_labels: path of the [N_train, K] float ``.npy`` of p_b, or None (needs ``allow_onehot``).
        allow_onehot: with ``soft_labels=None``, train with one-hot targets instead of refusing (see above).
        confidence_mask: use p_b[y_b] instead of p̂_b as the Binomial probability (reference ImageNet run).
        eps_double_epoch: from this 0-based epoch on, ε is doubled (reference ``--warmup``); None = never.
        **kwargs: ``model``, ``sigma``, ``optimizer``, ... of :class:`SmoothingMethod`.
    """

    needs_sample_index = True

    def __init__(
        self,
        num_noise_vec: int = 4,
        epsilon: float = 1.0,
        num_steps: int = 4,
        lbd: float = 1.0,
        soft_labels: str | None = None,
        allow_onehot: bool = False,
        confidence_mask: bool = False,
        eps_double_epoch: int | None = None,
        **kwargs,
    ) -> None:
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        require_positive("method.epsilon", epsilon)
        require_at_least("method.num_steps", num_steps, 1)
        if isinstance(lbd, bool) or not isinstance(lbd, int | float) or lbd < 0:
            raise ConfigError("method.lbd", lbd, ">= 0", "lbd is the weight of L^high (0 disables it)")
        if eps_double_epoch is not None:
            require_at_least("method.eps_double_epoch", eps_double_epoch, 0)
        if confidence_mask and soft_labels is None:
            raise ConfigError(
                "method.confidence_mask",
                True,
                "false when method.soft_labels is null",
                f"p_b[y] needs the pre-trained soft labels; {MAKE_SOFT_LABELS}",
            )
        if soft_labels is not None and not Path(soft_labels).is_file():
            raise ConfigError(
                "method.soft_labels", soft_labels, "an existing .npy file or null", MAKE_SOFT_LABELS
            )
        super().__init__(num_chunks=num_noise_vec, **kwargs)
        self.num_noise_vec = int(num_noise_vec)
        self.epsilon = float(epsilon)
        self.num_steps = int(num_steps)
        self.lbd = float(lbd)
        self.soft_labels = None if soft_labels is None else str(soft_labels)
        self.allow_onehot = bool(allow_onehot)
        self.confidence_mask = bool(confidence_mask)
        self.eps_double_epoch = eps_double_epoch
        self._soft: np.ndarray | None = None

    # ------------------------------------------------------------ soft labels
    def attach_soft_labels(self, num_train: int, num_classes: int) -> None:
        """Load ``soft_labels`` (memory-mapped) after checking it is [num_train, num_classes]."""
        if self.soft_labels is not None:
            self._soft = load_soft_labels(self.soft_labels, num_train, num_classes)

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.soft_labels is None and not self.allow_onehot:
            raise ConfigError(
                "method.soft_labels",
                None,
                "the pre-trained model's soft labels (a .npy file)",
                f"CAT-RS without them is a different method; {MAKE_SOFT_LABELS}, or pass "
                "method.allow_onehot=true to train with one-hot targets (a deviation from the paper)",
            )
        if stage != "fit" or self.soft_labels is None or self._soft is not None:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "dataset"):
            raise ConfigError(
                "method.soft_labels",
                self.soft_labels,
                "used with an rs-lightning data module",
                "its training-set size and class count are checked against the file",
            )
        self.attach_soft_labels(len(datamodule.dataset("train")), int(datamodule.num_classes))

    def soft_targets(self, y: torch.Tensor, index: torch.Tensor | None, num_classes: int) -> torch.Tensor:
        """p_b of each chunk sample ``(B, K)``: its row of the soft-label file, or one-hot(y) without one."""
        if self.soft_labels is None:
            return F.one_hot(y, num_classes).float()
        if self._soft is None:
            raise RuntimeError("soft labels not loaded: fit with a data module or call attach_soft_labels()")
        if index is None:
            raise RuntimeError("CAT-RS needs dataset indices (datamodule.train_with_index = True)")
        rows = np.ascontiguousarray(self._soft[index.cpu().numpy()], dtype=np.float32)
        return torch.from_numpy(rows).to(y.device)

    # --------------------------------------------------------------- the step
    def sample_k(self, p_hat: torch.Tensor) -> torch.Tensor:
        """K_b ~ Binomial(M, p̂_b): the number of M uniforms below p̂_b, from the seeded noise generator."""
        u = torch.rand((len(p_hat), self.num_noise_vec), generator=self.noise_generator, device=p_hat.device)
        return (u < p_hat[:, None]).sum(dim=1)

    @property
    def current_epsilon(self) -> float:
        """ε, doubled from epoch ``eps_double_epoch`` on (reference ``--warmup``)."""
        doubled = self.eps_double_epoch is not None and self.current_epoch >= self.eps_double_epoch
        return 2.0 * self.epsilon if doubled else self.epsilon

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        m = self.num_noise_vec
        # (M, B, K), float32 under bf16-mixed: otherwise the soft labels p_b below would be rounded to bf16
        logits0, noise0 = self.noisy_logits(x, m)
        target = self.soft_targets(y, index, logits0.shape[-1]).to(logits0.dtype)
        ce = F.cross_entropy(logits0.flatten(0, 1), y.repeat(m), reduction="none").view(m, -1)
        if self.confidence_mask:
            p_hat = target.gather(1, y[:, None]).squeeze(1)
        else:
            p_hat = (logits0.detach().argmax(dim=-1) == y).float().mean(dim=0)
        k = self.sample_k(p_hat).clamp_min(1)
        low = bottom_k_sum(ce, k) / m
        with frozen_eval(self.model):  # one row per copy: row i·B + b is copy i of image b
            noise_adv = kl_noise_pgd(
                self.model,
                copy_rows(x, m),
                noise0.flatten(0, 1),
                copy_rows(target, m),
                epsilon=self.current_epsilon,
                steps=self.num_steps,
                copies=m,
            ).view_as(noise0)
        high = soft_kl(self.noisy_logits(x, noise=noise_adv)[0], target).amax(dim=0)
        full = (k == m).to(high.dtype)
        if self._trainer is not None:
            for name, value in (("high_fraction", full), ("low", low), ("high", high)):
                mean = value.detach().mean()
                self.log(f"train/catrs_{name}", mean, on_step=False, on_epoch=True, batch_size=len(x))
        return (low + self.lbd * full * high).mean()
