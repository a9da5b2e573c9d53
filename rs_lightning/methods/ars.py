"""Adaptive Randomized Smoothing training (Lyu et al., NeurIPS 2024;
ubc-systopia/adaptive-randomized-smoothing ``src/train.py`` and ``src/configs/*.yaml``).

End to end, one loss: cross-entropy on the logits of the certified pipeline (:mod:`rs_lightning.models.ars`)
with reparameterized noise, so the gradient reaches the mask network through m₂, through σ₂(‖w‖) and
through the averaging weights. No mask regularizer (the reference's are 0 in every config). Two optimizers,
the classifier's (``optim.optimizer`` / ``optim.scheduler``, the recipe) and the mask's
(``method.mask_optimizer`` / ``method.mask_scheduler``), both stepped every batch, their schedulers every
epoch. ``train_classifier=false`` is the reference's mask-only stage (``--resume_mask_only``): the classifier
(e.g. from ``classifier_checkpoint``, a Gaussian run) is frozen, and so are its BatchNorm statistics (the
reference's ``model.train()`` lets them drift). ``mode=static`` learns one input-independent mask, clamped to
[0, 1] after every step (``src/models/single_query_arch.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rs_lightning.models.ars import AdaptiveSmoothing, StaticMask, build_mask, query_sigmas
from rs_lightning.models.checkpoint import CheckpointError, CheckpointMeta, classifier_weights
from rs_lightning.validation import ConfigError

from . import schedule
from .base import SmoothingMethod


class AdaptiveRS(SmoothingMethod):
    """ARS (``mode=ars``: two queries and a mask UNet) or its static-mask baseline (``mode=static``).

    Args:
        mode: ``ars`` | ``static``.
        first_query_budget_frac: f ∈ (0, 1), the budget share of the first query (reference 0.5).
        mask_width: base width of the mask UNet (reference: CIFAR 32, CelebA 64, ImageNet 16).
        mask_optimizer: ``params -> Optimizer`` for the mask (a Hydra ``_partial_``).
        mask_scheduler: optional ``optimizer -> LRScheduler`` for it, stepped once per epoch.
        train_classifier: false = mask-only stage (frozen classifier, BatchNorm statistics fixed).
        classifier_checkpoint: optional train.py checkpoint whose classifier weights (``model.*``) are loaded
            before training (the mask-only stage's Cohen baseline).
        input_shape: (C, H, W); None = the data module's, read at setup.
        **kwargs: the :class:`SmoothingMethod` arguments.
    """

    def __init__(
        self,
        mode: str = "ars",
        first_query_budget_frac: float = 0.5,
        mask_width: int = 32,
        mask_optimizer: Callable[..., torch.optim.Optimizer] | None = None,
        mask_scheduler: Callable[..., Any] | None = None,
        train_classifier: bool = True,
        classifier_checkpoint: str | None = None,
        input_shape: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if mode not in ("ars", "static"):
            raise ConfigError("method.mode", mode, "ars or static", "vanilla is method=gaussian")
        if mask_optimizer is None:
            raise ConfigError("method.mask_optimizer", None, "an optimizer config (_partial_: true)")
        if not isinstance(train_classifier, bool):
            raise ConfigError("method.train_classifier", train_classifier, "true or false")
        query_sigmas(self.sigma, first_query_budget_frac)  # validates f before any work
        self.mode, self.mask_width = mode, int(mask_width)
        self.first_query_budget_frac = float(first_query_budget_frac)
        self.mask_optimizer_factory, self.mask_scheduler_factory = mask_optimizer, mask_scheduler
        self.train_classifier, self.classifier_checkpoint = train_classifier, classifier_checkpoint
        self.mask = None
        self._pipeline: AdaptiveSmoothing | None = None
        if input_shape is not None:
            self._build(tuple(int(v) for v in input_shape))

    # ------------------------------------------------------------------ setup
    def _build(self, input_shape: tuple[int, ...]) -> None:
        self.mask = build_mask(self.mode, input_shape, self.mask_width)
        pipeline = AdaptiveSmoothing(
            self.model,
            sigma=self.sigma,
            input_shape=input_shape,
            mode=self.mode,
            mask=self.mask,
            first_query_budget_frac=self.first_query_budget_frac,
        )
        object.__setattr__(self, "_pipeline", pipeline)  # not a submodule: its parts already are
        if not self.train_classifier:
            self.model.requires_grad_(False)
            self.model.eval()

    def setup(self, stage: str) -> None:
        if self.mask is None:
            self._build(tuple(self.trainer.datamodule.input_shape))
        if self.classifier_checkpoint and stage == "fit" and self.trainer.ckpt_path is None:
            self._load_classifier(str(self.classifier_checkpoint))  # a resume restores its own weights

    def _load_classifier(self, path: str) -> None:
        """The classifier of a train.py run at this run's sigma, input shape and normalization."""
        expect = {"sigma": self.sigma}
        meta = self.metadata  # None: built without train.py, which records the rest
        if meta is not None:
            expect |= {"input_shape": meta.input_shape, "mean": meta.mean, "std": meta.std}
            expect["model"] = meta.model
        expect["noise"] = "gaussian"  # ARS's accounting is Gaussian: another noise's classifier is refused
        weights = classifier_weights(path, "method.classifier_checkpoint", expect)
        try:
            self.model.load_state_dict(weights)
        except RuntimeError as err:
            raise CheckpointError(
                f"method.classifier_checkpoint={path!r} holds a classifier of another architecture or "
                f"input shape than this run's ({str(err).splitlines()[0]}); pass a checkpoint trained with "
                "the same model= and data="
            ) from err

    def train(self, mode: bool = True):
        super().train(mode)
        if not self.train_classifier:
            self.model.eval()  # the frozen classifier keeps its BatchNorm statistics
        return self

    @property
    def certified_model(self) -> AdaptiveSmoothing:
        return self._pipeline

    # ------------------------------------------------------------------ loss
    def pipeline_noise(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Standard-normal noise ``(B, noise_draws, *x.shape[1:])`` for the pipeline."""
        shape = (x.shape[0], self._pipeline.noise_draws, *x.shape[1:])
        gen = generator or self.noise_generator
        return torch.randn(shape, generator=gen, device=x.device, dtype=x.dtype)

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        """CE(F(x, ε), y) with reparameterized noise ε (as ``src/train.py``)."""
        return F.cross_entropy(self._pipeline(x, self.pipeline_noise(x)), y)

    def noisy_validation_logits(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self._pipeline(x, self.pipeline_noise(x, generator))

    def after_optimizer_step(self) -> None:
        if isinstance(self.mask, StaticMask):
            self.mask.clamp_()

    # ------------------------------------------------------------- optimizers
    def configure_optimizers(self):
        if self.mask is None:  # direct use without a trainer and without input_shape
            raise ConfigError("method.input_shape", None, "(C, H, W) when no data module gives it")
        pairs = []
        if self.train_classifier:
            pairs.append((self.optimizer_factory, self.scheduler_factory, self.model.parameters()))
        pairs.append((self.mask_optimizer_factory, self.mask_scheduler_factory, self.mask.parameters()))
        optimizers, schedulers = [], []
        for make_optimizer, make_scheduler, params in pairs:
            optimizers.append(make_optimizer(params=params))
            if make_scheduler is not None:
                schedulers.append(make_scheduler(optimizer=optimizers[-1]))
        schedule.step_before_training(schedulers, self.scheduler_epoch_offset)  # the recipe's LR timing
        return optimizers, schedulers

    def checkpoint_meta(self) -> CheckpointMeta:
        pipeline = {
            "mode": self.mode,
            "first_query_budget_frac": self.first_query_budget_frac,
            "mask_width": self.mask_width,
        }
        return dataclasses.replace(super().checkpoint_meta(), pipeline=pipeline)
