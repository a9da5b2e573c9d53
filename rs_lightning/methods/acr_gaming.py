"""The training recipe of "Average Certified Radius is a Poor Metric for Randomized Smoothing" (Sun, Mao,
Müller & Vechev, ICML 2025, arXiv 2410.06895): Gaussian training plus discarding hard inputs, reweighting by
approximate certified radius and an adaptive attack on the noise sphere.

Step semantics of eth-sri/acr-weakness ``code/train.py`` / ``train_utils.py`` (methods-advanced.md §3.2–3.3).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.trainer.states import TrainerFn

from rs_lightning.attacks.common import frozen_eval
from rs_lightning.attacks.noise_space import sphere_noise_pgd
from rs_lightning.data.sampling import ResamplingSampler
from rs_lightning.validation import ConfigError, require_at_least, require_positive

from .base import SmoothingMethod
from .curation import interleave_shares, load_pa_file, radius_weights, true_label_hits

STATE_KEY = "rs_lightning_acr_gaming_data"


class ACRGaming(SmoothingMethod):
    """Sun et al. (ICML 2025) §3.2: Gaussian training with m noise copies per image, CE on all B·m copies
    (mean), one optimizer step per chunk of B/m images (``num_chunks = m``, §0 "m-chunking"), plus three
    switches that act from the 0-based epoch ``ds_epoch`` = E_ds:

    1. ``discard_hard``: once, at the start of epoch E_ds, with the model as it is after epoch E_ds−1 (eval
       mode), p̂_i = share of N0 Gaussian draws classified as the true label y_i, one augmented view of every
       training image (engine ``sample_counts``, ``Phase.ESTIMATION``, seed mixed from ``(noise_seed, epoch,
       N0)``); only images with p̂_i ≥ τ are kept, permanently. ``discard_pa_file`` supplies p̂ instead
       (the reference's ImageNet runs).
    2. ``reweight``: at E_ds and every R epochs after, p̂ is re-estimated on the kept images with n draws and
       each epoch samples N_full images with replacement, weights w = :func:`radius_weights` (p̂).
    3. ``sphere_attack``: from ``attack_epoch`` (default E_ds) every drawn noise is replaced by
       :func:`~rs_lightning.attacks.noise_space.sphere_noise_pgd` (same L2 norm, first fooling iterate);
       the loss is CE on these noises only.

    Data changes go through a :class:`~rs_lightning.data.sampling.ResamplingSampler` installed as the data
    module's ``train_sampler``; the method updates it right before each epoch's indices are drawn (the
    sampler's ``before_draw``): with DataLoader workers, Lightning draws the first epoch of a fit (also the
    first after a resume) before ``on_train_epoch_start``. Under DDP each rank estimates indices ``r::W``
    and the hit counts are all-gathered, so every rank keeps the same pool.

    Args:
        num_noise_vec: m, noise copies per image = chunks per loader batch.
        ds_epoch: E_ds, 0-based epoch from which the switches act (< trainer.max_epochs); a float in [0, 1) is
            a share of the schedule, E_ds = ⌊ds_epoch · max_epochs⌋ (the presets use 0.4 = 60/150, the
            paper's CIFAR-10 σ = 0.25 value, so they work with any recipe).
        discard_hard / reweight / sphere_attack: the three switches.
        discard_threshold: τ in [0, 1]; keep p̂ ≥ τ.
        discard_samples: N0, draws per image of the discard estimate.
        discard_pa_file: optional ``.npy`` of per-training-image p̂ used instead of estimating.
        reweight_samples: n, draws per image of the weight estimate.
        reweight_every: R, epochs between re-estimations.
        attack_steps: S, attack steps.
        attack_step_size: η_s, L2 step length in [0,1]-pixel units (the reference's ``--epsilon``).
        attack_epoch: first epoch of the attack; None = ``ds_epoch``.
        estimate_batch_size: noisy inputs per forward pass of the p̂ estimates.
        **kwargs: ``model``, ``sigma``, ``optimizer``, ... of :class:`SmoothingMethod`.
    """

    def __init__(
        self,
        num_noise_vec: int = 4,
        ds_epoch: int | float = 60,
        discard_hard: bool = True,
        discard_threshold: float = 0.5,
        discard_samples: int = 100,
        discard_pa_file: str | None = None,
        reweight: bool = True,
        reweight_samples: int = 16,
        reweight_every: int = 10,
        sphere_attack: bool = True,
        attack_steps: int = 3,
        attack_step_size: float = 0.25,
        attack_epoch: int | None = None,
        estimate_batch_size: int = 4096,
        **kwargs,
    ) -> None:
        for key, flag in (
            ("discard_hard", discard_hard),
            ("reweight", reweight),
            ("sphere_attack", sphere_attack),
        ):
            if not isinstance(flag, bool):
                raise ConfigError(f"method.{key}", flag, "true or false")
        require_at_least("method.num_noise_vec", num_noise_vec, 1)
        if isinstance(ds_epoch, float):
            if not 0 <= ds_epoch < 1:
                raise ConfigError("method.ds_epoch", ds_epoch, "an epoch (integer >= 0) or a share in [0, 1)")
        else:
            require_at_least("method.ds_epoch", ds_epoch, 0)
        if (
            isinstance(discard_threshold, bool)
            or not isinstance(discard_threshold, int | float)
            or not (0 <= discard_threshold <= 1)
        ):
            raise ConfigError(
                "method.discard_threshold", discard_threshold, "in [0, 1]", "tau is a share of draws"
            )
        require_at_least("method.discard_samples", discard_samples, 1)
        require_at_least("method.reweight_samples", reweight_samples, 1)
        if reweight and not radius_weights(0.0, reweight_samples) > 0:
            raise ConfigError(
                "method.reweight_samples", reweight_samples, "a budget giving every weight > 0 (e.g. 16)",
                "with so few draws the clipped Clopper-Pearson radius of a p_hat = 0.75 input is <= 0",
            )  # fmt: skip
        require_at_least("method.reweight_every", reweight_every, 1)
        if sphere_attack:
            require_at_least("method.attack_steps", attack_steps, 1)
        require_positive("method.attack_step_size", attack_step_size)
        if attack_epoch is not None:
            require_at_least("method.attack_epoch", attack_epoch, 0)
        require_at_least("method.estimate_batch_size", estimate_batch_size, 1)
        if discard_pa_file is not None:
            if not discard_hard:
                raise ConfigError(
                    "method.discard_pa_file", discard_pa_file, "null when method.discard_hard=false"
                )
            if not Path(discard_pa_file).is_file():
                raise ConfigError("method.discard_pa_file", discard_pa_file, "an existing .npy file or null")
        super().__init__(num_chunks=num_noise_vec, **kwargs)
        self.num_noise_vec = int(num_noise_vec)
        self.ds_share = ds_epoch if isinstance(ds_epoch, float) else None
        self.ds_epoch = 0 if self.ds_share is not None else int(ds_epoch)  # resolved in on_fit_start
        self._attack_follows_ds = attack_epoch is None
        self.discard_hard, self.reweight, self.sphere_attack = discard_hard, reweight, sphere_attack
        self.discard_threshold = float(discard_threshold)
        self.discard_samples = int(discard_samples)
        self.discard_pa_file = None if discard_pa_file is None else str(discard_pa_file)
        self.reweight_samples = int(reweight_samples)
        self.reweight_every = int(reweight_every)
        self.attack_steps = int(attack_steps)
        self.attack_step_size = float(attack_step_size)
        self.attack_epoch = self.ds_epoch if attack_epoch is None else int(attack_epoch)
        self.estimate_batch_size = int(estimate_batch_size)
        self.sampler: ResamplingSampler | None = None
        self._restored: dict | None = None
        self._discarded = False
        self._prepared_epoch: int | None = None
        self._stats: dict[str, float] = {}
        self._new_weights: np.ndarray | None = None

    @property
    def curates_data(self) -> bool:
        return self.discard_hard or self.reweight

    # ------------------------------------------------------------------ setup
    def on_fit_start(self) -> None:
        max_epochs = self.trainer.max_epochs
        if self.ds_share is not None:
            self.ds_epoch = int(self.ds_share * max(max_epochs or 0, 0))
            if self._attack_follows_ds:
                self.attack_epoch = self.ds_epoch
        starts = [("method.ds_epoch", self.ds_epoch)] if self.curates_data else []
        if self.sphere_attack:
            key = "method.attack_epoch" if self.attack_epoch != self.ds_epoch else "method.ds_epoch"
            starts.append((key, self.attack_epoch))
        debug_run = bool(getattr(self.trainer, "fast_dev_run", False))  # forces max_epochs = 1: not checked
        for key, epoch in starts:
            if not debug_run and max_epochs is not None and max_epochs >= 0 and epoch >= max_epochs:
                raise ConfigError(
                    key, epoch, f"< trainer.max_epochs = {max_epochs}",
                    f"The recipe would never act: pass e.g. {key}={max_epochs // 2} "
                    "(the paper's E_ds is set for its 150-epoch CIFAR-10 schedule)",
                )  # fmt: skip
        if not self.curates_data:
            return
        datamodule = getattr(self.trainer, "datamodule", None)
        if (
            datamodule is None
            or not hasattr(datamodule, "train_sampler")
            or not hasattr(datamodule, "dataset")
        ):
            raise ConfigError(
                "method.discard_hard" if self.discard_hard else "method.reweight", True,
                "used with an rs-lightning data module",
                "the method resamples the training set via RSDataModule.train_sampler",
            )  # fmt: skip
        num_train = len(datamodule.dataset("train"))
        if self.sampler is None or self.sampler.num_samples != num_train:
            self.sampler = ResamplingSampler(num_train, seed=self.noise_seed, before_draw=self._before_draw)
        if self._restored is not None:
            self._apply_state(self._restored)
            self._restored = None
        datamodule.train_sampler = self.sampler

    def teardown(self, stage: str) -> None:
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if (
            stage == "fit"
            and self.sampler is not None
            and getattr(datamodule, "train_sampler", None) is self.sampler
        ):
            datamodule.train_sampler = None  # a later fit (or another method) starts from plain shuffling

    def _before_draw(self) -> None:
        trainer = self._trainer
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            self.prepare_epoch(trainer.current_epoch)

    def on_train_batch_start(self, batch, batch_idx: int) -> None:
        if self.curates_data and self._prepared_epoch != self.current_epoch:
            raise RuntimeError(
                "ACRGaming: the training loader did not draw from the method's sampler this epoch; the data "
                "module's train_dataloader() must use its train_sampler (see RSDataModule)"
            )

    # ----------------------------------------------------------- data curation
    def prepare_epoch(self, epoch: int) -> None:
        """Discard / reweight as due at the start of ``epoch`` (idempotent per epoch)."""
        if self._prepared_epoch == epoch:
            return
        self._prepared_epoch = epoch
        if epoch < self.ds_epoch:
            return
        if self.discard_hard and not self._discarded:
            self._discard(epoch)
        if self.reweight and (
            (epoch - self.ds_epoch) % self.reweight_every == 0 or self.sampler.weights is None
        ):
            self._reweight(epoch)

    def _hits(self, indices: np.ndarray, num_samples: int, epoch: int) -> np.ndarray:
        """True-label hits of ``num_samples`` draws for every index; rank r estimates ``indices[r::W]``."""
        datamodule = self.trainer.datamodule
        world, rank = self.trainer.world_size, self.trainer.global_rank
        seed = int(np.random.SeedSequence([self.noise_seed, epoch, num_samples]).generate_state(1)[0])
        with frozen_eval(self.model):
            hits = true_label_hits(
                self.model, datamodule.dataset("train"), indices[rank::world], num_samples=num_samples,
                sigma=self.sigma, num_classes=int(datamodule.num_classes),
                batch_size=self.estimate_batch_size, seed=seed, device=self.device,
                num_workers=getattr(datamodule, "num_workers", 0),
            )  # fmt: skip
        length = -(-len(indices) // world)
        padded = torch.full((length,), -1, dtype=torch.long, device=self.device)
        padded[: len(hits)] = hits
        gathered = self.all_gather(padded) if world > 1 else padded
        return interleave_shares(gathered.reshape(world, length), len(indices))

    def _discard(self, epoch: int) -> None:
        total = self.sampler.num_samples
        if self.discard_pa_file is not None:
            p_hat = load_pa_file(self.discard_pa_file, total)
        else:
            p_hat = self._hits(np.arange(total), self.discard_samples, epoch) / self.discard_samples
        kept = np.flatnonzero(p_hat >= self.discard_threshold)
        if len(kept) == 0:
            raise ConfigError(
                "method.discard_threshold", self.discard_threshold, "reached by some training input",
                f"at epoch {epoch} no training input has p_hat >= tau (max {p_hat.max():.3f}); lower "
                "method.discard_threshold or train longer first (method.ds_epoch)",
            )  # fmt: skip
        self.sampler.set_subset(kept)
        self._discarded = True
        self._stats.update(kept_inputs=len(kept), discarded_inputs=total - len(kept))

    def _reweight(self, epoch: int) -> None:
        pool = (
            np.arange(self.sampler.num_samples)
            if self.sampler.subset is None
            else self.sampler.subset.numpy()
        )
        hits = self._hits(pool, self.reweight_samples, epoch)
        weights = radius_weights(hits / self.reweight_samples, self.reweight_samples)
        self.sampler.set_weights(weights)
        self._new_weights = weights
        self._stats.update(weight_mean=weights.mean(), weight_min=weights.min(), weight_max=weights.max())

    # ---------------------------------------------------------------- logging
    def on_train_epoch_end(self) -> None:
        super().on_train_epoch_end()
        for name, value in self._stats.items():
            self.log(f"train/{name}", float(value), on_step=False, on_epoch=True, sync_dist=True)
        if self._new_weights is not None and self.trainer.is_global_zero:
            self._log_histogram(self._new_weights)
        self._new_weights = None

    def _log_histogram(self, weights: np.ndarray) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

        for logger in self.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_histogram("train/weights", weights, global_step=self.global_step)
            elif isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log(
                    {"train/weights": wandb.Histogram(weights), "trainer/global_step": self.global_step}
                )

    # ------------------------------------------------------------ checkpoints
    def _apply_state(self, state: dict) -> None:
        self.sampler.load_state_dict(state)
        self._discarded = bool(state.get("discarded", False))
        if self._discarded and self.sampler.subset is not None:
            kept = len(self.sampler.subset)
            self._stats.update(kept_inputs=kept, discarded_inputs=self.sampler.num_samples - kept)
        if self.sampler.weights is not None:
            w = self.sampler.weights
            self._stats.update(
                weight_mean=w.mean().item(), weight_min=w.min().item(), weight_max=w.max().item()
            )

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        super().on_save_checkpoint(checkpoint)
        if self.sampler is not None:
            checkpoint[STATE_KEY] = {**self.sampler.state_dict(), "discarded": self._discarded}

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        super().on_load_checkpoint(checkpoint)
        self._restored = checkpoint.get(STATE_KEY)
        if self._restored is not None and self.sampler is not None:
            self._apply_state(self._restored)

    # --------------------------------------------------------------- the step
    @property
    def attack_active(self) -> bool:
        return self.sphere_attack and self.current_epoch >= self.attack_epoch

    def training_loss(self, x: torch.Tensor, y: torch.Tensor, index=None) -> torch.Tensor:
        m = self.num_noise_vec
        x_rep, noise = self.noisy_copies(x, m)  # image-major: row b*m + j is copy j of image b
        y_rep = y.repeat_interleave(m)
        if self.attack_active:
            with frozen_eval(self.model):
                noise = sphere_noise_pgd(
                    self.model, x_rep, noise, y_rep, steps=self.attack_steps, step_size=self.attack_step_size,
                    copies=m,
                )  # fmt: skip
        return F.cross_entropy(self.model(x_rep + noise), y_rep)
