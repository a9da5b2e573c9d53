"""Denoised smoothing: a denoiser D trained in front of a frozen classifier f (Salman, Sun, Yang, Kapoor &
Kolter, NeurIPS 2020, "Denoised Smoothing: A Provable Defense for Pretrained Classifiers", §3;
microsoft/denoised-smoothing ``code/train_denoiser.py``). The smoothed classifier is built from f∘D
(:class:`~rs_lightning.models.denoisers.DenoisedClassifier`), certified at the σ D was trained at.

The three objectives, on x + δ with δ the training noise at σ:

- ``mse``: ‖D(x+δ) − x‖², the mean over pixels (their ``denoising``, ``MSELoss``);
- ``stability``: CE(f(D(x+δ)), argmax f(x)) (Eq. 5), needing no labels;
- ``classification``: CE(f(D(x+δ)), y);
- ``ddpm``: the DDPM loss of a :class:`~rs_lightning.models.diffusion.DiffusionDenoiser` over all timesteps
  (Ho et al., NeurIPS 2020), for one-shot diffusion denoising (Carlini et al., ICLR 2023); f is not used.

As in the paper, stability and classification start from an MSE-trained denoiser
(``denoiser_checkpoint``, their ``--pretrained-denoiser``). f stays frozen in eval mode (their
``clf.eval()``, ``requires_grad_(clf, False)``), so its weights and BatchNorm statistics never change; the
optimizer steps only D. f comes from ``classifier_checkpoint`` (a train.py checkpoint with the same
``model=`` and ``data=``) or from ``model.weights`` (a timm/torchvision/registered model's local file).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from rs_lightning.models.checkpoint import (
    CheckpointError,
    CheckpointMeta,
    classifier_state,
    denoiser_state,
    read_checkpoint,
)
from rs_lightning.models.denoisers import DenoisedClassifier, check_denoiser_output
from rs_lightning.models.registry import DENOISERS
from rs_lightning.models.weights import WEIGHTS_KEY, architecture
from rs_lightning.registry import RegistryError
from rs_lightning.smoothing.certificate import NOISES
from rs_lightning.validation import ConfigError

from .base import SmoothingMethod

OBJECTIVES = ("mse", "stability", "classification", "ddpm")


class DenoiserTraining(SmoothingMethod):
    """Train D in front of the frozen base classifier ``model`` (f).

    Args:
        denoiser: D's config, a registered denoiser (:data:`~rs_lightning.models.registry.DENOISERS`,
            e.g. ``{"_target_": "rs_lightning.models.denoisers.DnCNN", "depth": 17, "channels": 64}``).
        objective: ``mse`` | ``stability`` | ``classification`` (module docstring).
        classifier_checkpoint: a train.py checkpoint whose classifier is f; None: f is ``model`` as built,
            which then needs initial weights (``model.weights``).
        denoiser_checkpoint: a checkpoint of this method whose D starts this run (the MSE stage), trained
            at the same σ with the same denoiser config.
        input_shape: (C, H, W); None = the data module's, read at setup.
        **kwargs: the :class:`SmoothingMethod` arguments.
    """

    noises = NOISES  # D learns to remove whatever noise it is trained with; f∘D is a plain base classifier

    def __init__(
        self,
        denoiser: Mapping,
        objective: str = "mse",
        classifier_checkpoint: str | None = None,
        denoiser_checkpoint: str | None = None,
        input_shape: Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if isinstance(denoiser, DictConfig):
            denoiser = OmegaConf.to_container(denoiser, resolve=True)
        if not isinstance(denoiser, Mapping) or "_target_" not in denoiser:
            raise ConfigError("method.denoiser", denoiser, "a denoiser config with _target_")
        if objective not in OBJECTIVES:
            raise ConfigError("method.objective", objective, " or ".join(OBJECTIVES))
        self.denoiser_config, self.objective = dict(denoiser), objective
        self.classifier_checkpoint, self.denoiser_checkpoint = classifier_checkpoint, denoiser_checkpoint
        self.model.requires_grad_(False)
        self.model.eval()
        self.denoiser: torch.nn.Module | None = None
        self._denoised: DenoisedClassifier | None = None
        self._loaded = False
        if input_shape is not None:
            self._build(tuple(int(v) for v in input_shape))

    # ------------------------------------------------------------------ setup
    def _build(self, input_shape: tuple[int, ...]) -> None:
        try:
            self.denoiser = DENOISERS.build(self.denoiser_config, "method.denoiser", input_shape=input_shape)
        except RegistryError as err:
            config = self.denoiser_config
            raise ConfigError("method.denoiser", config, "a registered denoiser", str(err)) from err
        if hasattr(self.denoiser, "sigma"):  # a diffusion denoiser: its timestep follows the noise level
            self.denoiser.sigma = self.sigma
        if self.objective == "ddpm" and not hasattr(self.denoiser, "ddpm_loss"):
            raise ConfigError(
                "method.objective",
                "ddpm",
                "mse, stability or classification for this denoiser",
                f"ddpm trains a diffusion model (rs_lightning.models.diffusion.DiffusionDenoiser), not a "
                f"{type(self.denoiser).__name__}",
            )
        check_denoiser_output(self.denoiser, input_shape, "method.denoiser")
        object.__setattr__(self, "_denoised", DenoisedClassifier(self.denoiser, self.model))

    def prepare(self, input_shape: tuple[int, ...], resuming: bool) -> None:
        if self.denoiser is None:
            self._build(input_shape)
        if not resuming:  # a resume restores both parts from its checkpoint
            self._load_parts()

    def setup(self, stage: str) -> None:
        """For use without train.py: build D for the data module's images and load the parts."""
        if self.denoiser is None:
            self._build(tuple(self.trainer.datamodule.input_shape))
        if stage == "fit" and self.trainer.ckpt_path is None and not self._loaded:
            self._load_parts()

    def _load_parts(self) -> None:
        """f from ``classifier_checkpoint`` (else ``model.weights`` must have given it) and D from
        ``denoiser_checkpoint``."""
        if self.classifier_checkpoint:
            self._load_classifier(str(self.classifier_checkpoint))
        elif self.metadata is not None and not (self.metadata.model or {}).get(WEIGHTS_KEY):
            raise ConfigError(
                "method.classifier_checkpoint",
                None,
                "a train.py checkpoint of the classifier f",
                "or give f's weights as model.weights=<file>: a denoiser is trained in front of a trained "
                "classifier, not a randomly initialized one",
            )
        if self.denoiser_checkpoint:
            self._load_denoiser(str(self.denoiser_checkpoint))
        self._loaded = True

    def _read(self, path: str, key: str) -> tuple[dict, CheckpointMeta]:
        try:
            return read_checkpoint(path)
        except CheckpointError as err:
            raise CheckpointError(f"{key}: {err}") from err

    def _require_same(self, meta: CheckpointMeta, key: str, path: str, names: Sequence[str]) -> None:
        now = self.metadata
        for name in names:
            recorded, wanted = getattr(meta, name), getattr(now, name)
            if name == "model":
                recorded, wanted = architecture(recorded or {}), architecture(wanted or {})
            if recorded != wanted:
                raise CheckpointError(
                    f"{key}={path!r} holds a model with {name}={recorded!r}, but this run has "
                    f"{name}={wanted!r}; pass a checkpoint trained with the same model= and data="
                )

    def _load_classifier(self, path: str) -> None:
        """f from a train.py checkpoint: the same architecture, input shape, classes and normalization."""
        key = "method.classifier_checkpoint"
        checkpoint, meta = self._read(path, key)
        if meta.denoiser is not None or meta.pipeline is not None:
            raise CheckpointError(
                f"{key}={path!r} holds a {'denoised classifier' if meta.denoiser else 'pipeline'}, not a "
                "plain classifier; pass the checkpoint of the classifier f itself"
            )
        if self.metadata is not None:
            self._require_same(meta, key, path, ("model", "input_shape", "num_classes", "mean", "std"))
        try:
            self.model.load_state_dict(classifier_state(checkpoint, path))
        except RuntimeError as err:
            raise CheckpointError(
                f"{key}={path!r} holds weights for another architecture than this run's model= "
                f"({str(err).splitlines()[0]}); pass a checkpoint trained with the same model="
            ) from err

    def _load_denoiser(self, path: str) -> None:
        """D from an earlier run of this method (the MSE stage): the same denoiser, σ and input shape."""
        key = "method.denoiser_checkpoint"
        checkpoint, meta = self._read(path, key)
        if meta.denoiser is None:
            raise CheckpointError(f"{key}={path!r} holds no denoiser; pass a checkpoint of method=denoiser")
        if meta.denoiser.get("model") != self.denoiser_config:
            raise CheckpointError(
                f"{key}={path!r} holds the denoiser {meta.denoiser.get('model')!r}, but this run trains "
                f"{self.denoiser_config!r}; pass the same method.denoiser"
            )
        if float(meta.denoiser["sigma"]) != self.sigma or meta.noise != self.noise:
            raise CheckpointError(
                f"{key}={path!r} holds a denoiser trained at sigma={meta.denoiser['sigma']} ({meta.noise} "
                f"noise), but this run has sigma={self.sigma} ({self.noise}); pass one trained at this sigma"
            )
        if self.metadata is not None:
            self._require_same(meta, key, path, ("input_shape",))
        try:
            self.denoiser.load_state_dict(denoiser_state(checkpoint))
        except RuntimeError as err:
            raise CheckpointError(f"{key}={path!r}: {str(err).splitlines()[0]}") from err

    def train(self, mode: bool = True):
        super().train(mode)
        self.model.eval()  # f is frozen: BatchNorm statistics and dropout stay as trained
        return self

    def trained_parameters(self):
        if self.denoiser is None:  # direct use without a trainer and without input_shape
            raise ConfigError("method.input_shape", None, "(C, H, W) when no data module gives it")
        return self.denoiser.parameters()

    @property
    def certified_model(self) -> DenoisedClassifier:
        return self._denoised

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._denoised(x)

    # ------------------------------------------------------------------ loss
    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        if self.objective == "ddpm":  # the diffusion model's own loss over all timesteps (Ho et al. 2020)
            return self.denoiser.ddpm_loss(x, self.noise_generator)
        denoised = self.denoiser(x + self.training_noise(x))
        if self.objective == "mse":
            return F.mse_loss(denoised, x)
        if self.objective == "stability":
            with torch.no_grad():
                y = self.model(x).argmax(dim=1)
        return F.cross_entropy(self.model(denoised), y)

    def noisy_validation_logits(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return self._denoised(x + self.training_noise(x, generator))

    def checkpoint_meta(self) -> CheckpointMeta:
        denoiser = {
            "model": self.denoiser_config,
            "sigma": self.sigma,
            "objective": self.objective,
            "classifier": None if self.classifier_checkpoint is None else str(self.classifier_checkpoint),
        }
        return dataclasses.replace(super().checkpoint_meta(), denoiser=denoiser)
