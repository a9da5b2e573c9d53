"""The training recipe of "Average Certified Radius is a Poor Metric for Randomized Smoothing" (Sun, Mao,
Müller & Vechev, ICML 2025, arXiv 2410.06895): Gaussian training plus discarding hard inputs, reweighting by
approximate certified radius and an adaptive attack on the noise sphere.

Step semantics of eth-sri/acr-weakness ``code/train.py`` / ``code/train_utils.py`` and its
``script/*/train_*.sh``.
"""

from __future__ import annotations

import inspect

import torch

from rs_lightning.attacks.noise_space import sphere_noise_pgd
from rs_lightning.data.curation import ACRCuration, require_before_end, resolve_start_epoch
from rs_lightning.smoothing.soft import copies_ce, copy_rows, frozen_eval
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .base import SmoothingMethod

CURATION_OPTIONS = tuple(inspect.signature(ACRCuration).parameters)
"""``method.*`` keys that configure the data curation (``ds_epoch``, ``discard_hard``, ...)."""


class ACRGaming(SmoothingMethod):
    """Sun et al. (ICML 2025) §3.2: Gaussian training with m noise copies per image, CE on all B·m copies
    (mean), one optimizer step per chunk of B/m images (``num_chunks = m``, as its ``code/train.py``), plus
    three switches that act from the 0-based epoch ``ds_epoch`` = E_ds:

    1. ``discard_hard`` (once, at E_ds) and 2. ``reweight`` (at E_ds and every R epochs after): the data
       curation of :class:`~rs_lightning.data.curation.ACRCuration`, which this module returns from
       :meth:`configure_callbacks` (``self.curation``).
    3. ``sphere_attack``: from ``attack_epoch`` (default E_ds) every drawn noise is replaced by
       :func:`~rs_lightning.attacks.noise_space.sphere_noise_pgd` (same L2 norm, first fooling iterate; eval
       mode, frozen parameters); the loss is CE on these noises only.

    Args:
        num_noise_vec: m, noise copies per image = chunks per loader batch.
        sphere_attack: the third switch.
        attack_steps: S, attack steps.
        attack_step_size: η_s, L2 step length in [0,1]-pixel units (the reference's ``--epsilon``).
        attack_epoch: first epoch of the attack; None = E_ds.
        **kwargs: the curation options of :class:`ACRCuration` (``ds_epoch`` = E_ds, an epoch < max_epochs or
            a share in [0, 1) of the schedule — the presets use 0.4 = 60/150, the paper's CIFAR-10 σ = 0.25
            value —, ``discard_hard``, ``discard_threshold``, ``discard_samples``, ``discard_pa_file``,
            ``reweight``, ``reweight_samples``, ``reweight_every``, ``estimate_batch_size``), then ``model``,
            ``sigma``, ``optimizer``, ... of :class:`SmoothingMethod`.
    """

    def __init__(
        self,
        num_noise_vec: int = 4,
        sphere_attack: bool = True,
        attack_steps: int = 3,
        attack_step_size: float = 0.25,
        attack_epoch: int | None = None,
        **kwargs,
    ) -> None:
        if not isinstance(sphere_attack, bool):
            raise ConfigError("method.sphere_attack", sphere_attack, "true or false")
        curation = ACRCuration(**{key: kwargs.pop(key) for key in CURATION_OPTIONS if key in kwargs})
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        if sphere_attack:
            require_at_least("method.attack_steps", attack_steps, 1)
        require_positive("method.attack_step_size", attack_step_size)
        if attack_epoch is not None:
            require_at_least("method.attack_epoch", attack_epoch, 0)
        super().__init__(num_chunks=num_noise_vec, **kwargs)
        self.curation = curation
        self.num_noise_vec = int(num_noise_vec)
        self.sphere_attack = sphere_attack
        self.attack_steps = int(attack_steps)
        self.attack_step_size = float(attack_step_size)
        self._attack_follows_ds = attack_epoch is None
        self.attack_epoch = curation.ds_epoch if attack_epoch is None else int(attack_epoch)

    def configure_callbacks(self):
        """The data curation (:class:`ACRCuration`) when ``discard_hard`` or ``reweight`` is on."""
        return [self.curation] if self.curation.active else []

    def on_fit_start(self) -> None:
        if not self.sphere_attack:
            return
        ds_epoch = resolve_start_epoch(self.curation.ds_setting, self.trainer.max_epochs)
        if self._attack_follows_ds:
            self.attack_epoch = ds_epoch
        key = "method.attack_epoch" if self.attack_epoch != ds_epoch else "method.ds_epoch"
        require_before_end(self.trainer, key, self.attack_epoch)

    @property
    def attack_active(self) -> bool:
        return self.sphere_attack and self.current_epoch >= self.attack_epoch

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        m = self.num_noise_vec
        noise = self.draw_noise(x, m)  # (m, B, ...)
        if self.attack_active:
            with frozen_eval(self.model):  # one row per copy: row j·B + b is copy j of image b
                noise = sphere_noise_pgd(
                    self.model,
                    copy_rows(x, m),
                    noise.flatten(0, 1),
                    y.repeat(m),
                    steps=self.attack_steps,
                    step_size=self.attack_step_size,
                    copies=m,
                ).view_as(noise)
        logits, _ = self.noisy_logits(x, noise=noise)
        return copies_ce(logits, y)
