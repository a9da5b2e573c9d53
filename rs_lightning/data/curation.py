"""Data curation of the ACR-gaming recipe (Sun, Mao, Müller & Vechev, ICML 2025, arXiv 2410.06895, §3.2;
eth-sri/acr-weakness ``code/train.py`` / ``code/train_utils.py``, ``--ds_hard`` / ``--dataset_weight``):
discard hard training inputs once, reweight by approximate certified radius every R epochs.

:class:`ACRCuration` is a Lightning callback with its own checkpoint state. It installs a
:class:`~rs_lightning.data.sampling.ResamplingSampler` as the data module's ``train_sampler`` and estimates
p̂ with the training module's classifier (``pl_module.model``, ``.sigma``, ``.noise_seed``: any
:class:`~rs_lightning.methods.base.SmoothingMethod`). ``ACRGaming`` returns it from ``configure_callbacks()``,
so its options are the method's (``method.ds_epoch``, ``method.discard_threshold``, ...), and so are the keys
of its ConfigErrors.
"""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from rs_lightning.data.sampling import ResamplingSampler
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.engine import sample_counts
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.soft import frozen_eval
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import ConfigError, require_at_least

STATE_KEY = "rs_lightning_acr_gaming_data"
"""Top-level checkpoint key of the curated pool: ``{"subset", "weights", "discarded"}``."""
REWEIGHT_CLIP = 0.75
"""p̂ is clipped to [0.75, 1] before the weight is computed (reference ``train_utils.py``)."""
REWEIGHT_ALPHA = 0.1
"""Level of the one-sided Clopper–Pearson bound of the weights (``proportion_confint(alpha=0.2)[0]``)."""


def radius_weights(p_hat, n: int) -> np.ndarray:
    """w = Φ⁻¹(CP_lower(⌊n·clip(p̂, 0.75, 1)⌋, n, 0.1)): the Gaussian L2 certified radius in units of σ at
    budget n (acr-weakness ``--dataset_weight``; 0 where the bound is below 1/2); for n = 16, k = 12…16 gives
    0.154, 0.329, 0.526, 0.765, 1.108."""
    k = np.floor(n * np.clip(np.asarray(p_hat, dtype=np.float64), REWEIGHT_CLIP, 1.0))
    return Certificate().radius(clopper_pearson_lower(k, n, REWEIGHT_ALPHA), 1.0)


def load_pa_file(path: str | Path, num_train: int) -> np.ndarray:
    """A ``.npy`` of per-training-image p̂ in [0,1] (dataset order), e.g. the reference's ImageNet
    ``p_correct/train/imagenet/-1_50.npy``; anything else is a ConfigError on ``method.discard_pa_file``."""
    expected = f"a .npy of {num_train} per-training-image accuracies under noise in [0, 1]"
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ConfigError("method.discard_pa_file", str(path), expected, str(err)) from err
    if array.size != num_train or not np.issubdtype(array.dtype, np.number):
        raise ConfigError(
            "method.discard_pa_file",
            str(path),
            expected,
            f"it holds {array.dtype} of shape {list(array.shape)} for a training set of {num_train}",
        )
    array = array.astype(np.float64).reshape(-1)
    if not np.all((array >= 0) & (array <= 1)):
        raise ConfigError(
            "method.discard_pa_file",
            str(path),
            expected,
            f"its values span [{array.min()}, {array.max()}] (counts instead of shares?)",
        )
    return array


def true_label_hits(
    model: nn.Module,
    dataset: Dataset,
    indices: np.ndarray,
    *,
    num_samples: int,
    sigma: float,
    num_classes: int,
    batch_size: int,
    seed: int,
    device: torch.device,
    num_workers: int = 0,
) -> torch.Tensor:
    """How many of ``num_samples`` Gaussian draws ``f(x_i + δ)`` are classified as the **true** label y_i,
    for ``dataset[i]``, i in ``indices`` (one view per image, with the split's augmentation). Noise comes from
    the engine's ``Phase.ESTIMATION`` stream of ``(seed, i)``; ``batch_size`` noisy inputs per forward pass.
    Returns int64 ``(len(indices),)`` on ``device``."""
    loader = DataLoader(
        Subset(dataset, indices.tolist()),
        batch_size=max(1, batch_size // num_samples),
        shuffle=False,
        num_workers=num_workers,
    )
    hits, start = [], 0
    for x, y in loader:
        x, y = x.to(device), torch.as_tensor(y, device=device)
        counts = sample_counts(
            model,
            x,
            indices[start : start + len(x)],
            phase=Phase.ESTIMATION,
            num_samples=num_samples,
            sigma=sigma,
            num_classes=num_classes,
            batch_size=batch_size,
            seed=seed,
        )
        hits.append(counts.gather(1, y[:, None]).squeeze(1))
        start += len(x)
    return torch.cat(hits) if hits else torch.zeros(0, dtype=torch.long, device=device)


def interleave_shares(gathered: torch.Tensor, total: int) -> np.ndarray:
    """Undo the rank-strided split: rank r estimated ``indices[r::W]``, padded to a common length;
    ``gathered`` is ``(W, L)``. Returns the ``total`` values in index order."""
    world = gathered.shape[0]
    out = np.empty(total, dtype=np.int64)
    rows = gathered.cpu().numpy()
    for rank in range(world):
        share = len(range(rank, total, world))
        out[rank::world] = rows[rank, :share]
    return out


# ----------------------------------------------------------------------------------- the start epoch E_ds
def check_start_epoch(key: str, value) -> None:
    """An epoch (integer >= 0) or a share of the schedule in [0, 1)."""
    if isinstance(value, float):
        if not 0 <= value < 1:
            raise ConfigError(key, value, "an epoch (integer >= 0) or a share in [0, 1)")
    else:
        require_at_least(key, value, 0)


def resolve_start_epoch(value: int | float, max_epochs: int | None) -> int:
    """The 0-based epoch: ``value`` itself, or ⌊value · max_epochs⌋ for a share (0 before a fit)."""
    return int(value * max(max_epochs or 0, 0)) if isinstance(value, float) else int(value)


def require_before_end(trainer: pl.Trainer, key: str, epoch: int) -> None:
    """ConfigError unless ``epoch < trainer.max_epochs`` (``fast_dev_run`` forces 1 epoch: not checked)."""
    max_epochs = trainer.max_epochs
    if bool(getattr(trainer, "fast_dev_run", False)) or max_epochs is None or max_epochs < 0:
        return
    if epoch >= max_epochs:
        raise ConfigError(
            key,
            epoch,
            f"< trainer.max_epochs = {max_epochs}",
            f"The recipe would never act: pass e.g. {key}={max_epochs // 2} "
            "(the paper's E_ds is set for its 150-epoch CIFAR-10 schedule)",
        )


# ------------------------------------------------------------------------------------------ the callback
class ACRCuration(pl.Callback):
    """Discard and reweight the training set from the 0-based epoch E_ds (Sun et al. 2025, §3.2):

    1. ``discard_hard``: once, at the start of epoch E_ds, with the model as it is after epoch E_ds−1 (eval
       mode), p̂_i = share of N0 Gaussian draws classified as the true label y_i, one augmented view of every
       training image (engine ``sample_counts``, ``Phase.ESTIMATION``, seed mixed from ``(noise_seed, epoch,
       N0)``); only images with p̂_i ≥ τ are kept, permanently. ``discard_pa_file`` supplies p̂ instead
       (the reference's ImageNet runs).
    2. ``reweight``: at E_ds and every R epochs after, p̂ is re-estimated on the kept images with n draws and
       each epoch samples N_full images with replacement, weights w = :func:`radius_weights` (p̂).

    The sampler is updated right before each epoch's indices are drawn (its ``before_draw``): with DataLoader
    workers, Lightning draws the first epoch of a fit (also the first after a resume) before
    ``on_train_epoch_start``. Under DDP each rank estimates indices ``r::W`` and the hit counts are
    all-gathered, so every rank keeps the same pool. Logged at each epoch end: ``train/kept_inputs``,
    ``train/discarded_inputs``, ``train/weight_{mean,min,max}`` and a ``train/weights`` histogram after a
    reweighting. Checkpoints carry the pool and weights under :data:`STATE_KEY`; a resume does not
    re-estimate them.

    Args:
        ds_epoch: E_ds, an epoch (< trainer.max_epochs) or a share in [0, 1) of the schedule,
            E_ds = ⌊ds_epoch · max_epochs⌋ (resolved when the fit starts).
        discard_hard / reweight: the two switches (both false: the callback does nothing).
        discard_threshold: τ in [0, 1]; keep p̂ ≥ τ.
        discard_samples: N0, draws per image of the discard estimate.
        discard_pa_file: optional ``.npy`` of per-training-image p̂ used instead of estimating.
        reweight_samples: n, draws per image of the weight estimate.
        reweight_every: R, epochs between re-estimations.
        estimate_batch_size: noisy inputs per forward pass of the p̂ estimates.
    """

    def __init__(
        self,
        ds_epoch: int | float = 60,
        discard_hard: bool = True,
        discard_threshold: float = 0.5,
        discard_samples: int = 100,
        discard_pa_file: str | None = None,
        reweight: bool = True,
        reweight_samples: int = 16,
        reweight_every: int = 10,
        estimate_batch_size: int = 4096,
    ) -> None:
        for key, flag in (("discard_hard", discard_hard), ("reweight", reweight)):
            if not isinstance(flag, bool):
                raise ConfigError(f"method.{key}", flag, "true or false")
        check_start_epoch("method.ds_epoch", ds_epoch)
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
                "method.reweight_samples",
                reweight_samples,
                "a budget giving every weight > 0 (e.g. 16)",
                "with so few draws the clipped Clopper-Pearson radius of a p_hat = 0.75 input is <= 0",
            )
        require_at_least("method.reweight_every", reweight_every, 1)
        require_at_least("method.estimate_batch_size", estimate_batch_size, 1)
        if discard_pa_file is not None:
            if not discard_hard:
                raise ConfigError(
                    "method.discard_pa_file", discard_pa_file, "null when method.discard_hard=false"
                )
            if not Path(discard_pa_file).is_file():
                raise ConfigError("method.discard_pa_file", discard_pa_file, "an existing .npy file or null")
        self.ds_setting = ds_epoch
        self.ds_epoch = resolve_start_epoch(ds_epoch, None)  # a share is resolved in on_fit_start
        self.discard_hard, self.reweight = discard_hard, reweight
        self.discard_threshold = float(discard_threshold)
        self.discard_samples = int(discard_samples)
        self.discard_pa_file = None if discard_pa_file is None else str(discard_pa_file)
        self.reweight_samples = int(reweight_samples)
        self.reweight_every = int(reweight_every)
        self.estimate_batch_size = int(estimate_batch_size)
        self.sampler: ResamplingSampler | None = None
        self._trainer: pl.Trainer | None = None  # set during a fit, for the sampler's before_draw
        self._restored: dict | None = None
        self._discarded = False
        self._prepared_epoch: int | None = None
        self._stats: dict[str, float] = {}
        self._new_weights: np.ndarray | None = None

    @property
    def active(self) -> bool:
        """Whether it changes the data at all (``discard_hard`` or ``reweight``)."""
        return self.discard_hard or self.reweight

    # ------------------------------------------------------------------ setup
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.ds_epoch = resolve_start_epoch(self.ds_setting, trainer.max_epochs)
        if not self.active:
            return
        require_before_end(trainer, "method.ds_epoch", self.ds_epoch)
        datamodule = getattr(trainer, "datamodule", None)
        if (
            datamodule is None
            or not hasattr(datamodule, "train_sampler")
            or not hasattr(datamodule, "dataset")
        ):
            raise ConfigError(
                "method.discard_hard" if self.discard_hard else "method.reweight",
                True,
                "used with an rs-lightning data module",
                "the method resamples the training set via RSDataModule.train_sampler",
            )
        num_train = len(datamodule.dataset("train"))
        if self.sampler is None or self.sampler.num_samples != num_train:
            self.sampler = ResamplingSampler(
                num_train, seed=pl_module.noise_seed, before_draw=self._before_draw
            )
        if self._restored is not None:
            self._apply_state(self._restored)
            self._restored = None
        self._trainer = trainer
        datamodule.train_sampler = self.sampler

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        datamodule = getattr(trainer, "datamodule", None)
        if self.sampler is not None and getattr(datamodule, "train_sampler", None) is self.sampler:
            datamodule.train_sampler = None  # a later fit (or another method) starts from plain shuffling
        self._trainer = None

    def _before_draw(self) -> None:
        trainer = self._trainer
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            self.prepare_epoch(trainer.current_epoch)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if self.active and self._prepared_epoch != trainer.current_epoch:
            raise RuntimeError(
                "ACRCuration: the training loader did not draw from the method's sampler this epoch; the "
                "data module's train_dataloader() must use its train_sampler (see RSDataModule)"
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
        trainer = self._trainer
        module, datamodule = trainer.lightning_module, trainer.datamodule
        world, rank = trainer.world_size, trainer.global_rank
        seed = int(np.random.SeedSequence([module.noise_seed, epoch, num_samples]).generate_state(1)[0])
        with frozen_eval(module.model):
            hits = true_label_hits(
                module.model,
                datamodule.dataset("train"),
                indices[rank::world],
                num_samples=num_samples,
                sigma=module.sigma,
                num_classes=int(datamodule.num_classes),
                batch_size=self.estimate_batch_size,
                seed=seed,
                device=module.device,
                num_workers=getattr(datamodule, "num_workers", 0),
            )
        length = -(-len(indices) // world)
        padded = torch.full((length,), -1, dtype=torch.long, device=module.device)
        padded[: len(hits)] = hits
        gathered = module.all_gather(padded) if world > 1 else padded
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
                "method.discard_threshold",
                self.discard_threshold,
                "reached by some training input",
                f"at epoch {epoch} no training input has p_hat >= tau (max {p_hat.max():.3f}); lower "
                "method.discard_threshold or train longer first (method.ds_epoch)",
            )
        self.sampler.set_subset(kept)
        self._discarded = True
        self._stats.update(kept_inputs=len(kept), discarded_inputs=total - len(kept))

    def _reweight(self, epoch: int) -> None:
        subset = self.sampler.subset
        pool = np.arange(self.sampler.num_samples) if subset is None else subset.numpy()
        hits = self._hits(pool, self.reweight_samples, epoch)
        weights = radius_weights(hits / self.reweight_samples, self.reweight_samples)
        self.sampler.set_weights(weights)
        self._new_weights = weights
        self._stats.update(weight_mean=weights.mean(), weight_min=weights.min(), weight_max=weights.max())

    # ---------------------------------------------------------------- logging
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for name, value in self._stats.items():
            pl_module.log(f"train/{name}", float(value), on_step=False, on_epoch=True, sync_dist=True)
        if self._new_weights is not None and trainer.is_global_zero:
            self._log_histogram(trainer, self._new_weights)
        self._new_weights = None

    @staticmethod
    def _log_histogram(trainer: pl.Trainer, weights: np.ndarray) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                logger.experiment.add_histogram("train/weights", weights, global_step=trainer.global_step)
            elif isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log(
                    {"train/weights": wandb.Histogram(weights), "trainer/global_step": trainer.global_step}
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

    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        if self.sampler is not None:
            checkpoint[STATE_KEY] = {**self.sampler.state_dict(), "discarded": self._discarded}

    def on_load_checkpoint(self, trainer, pl_module, checkpoint: dict) -> None:
        """Keeps the saved pool, applied when the fit starts (at once if the sampler already exists)."""
        self._restored = checkpoint.get(STATE_KEY)
        if self._restored is not None and self.sampler is not None:
            self._apply_state(self._restored)
