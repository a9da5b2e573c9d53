"""Certification during training: ACR@n, certified accuracy, mean pA and the pA ECDF at epoch end.

Runs Cohen et al.'s CERTIFY (n0 selection + n estimation draws, Clopper–Pearson at alpha) on a fixed,
evenly spaced subset of the validation (test) split, with the same engine and noise seeding as
``certify.py``: the logged numbers equal ``certify.py checkpoint=... n0=.. n=.. seed=.. skip=.. max=..``
(see :meth:`CertificationCallback.certify_command_args`). Under DDP each rank certifies every
world_size-th input of the subset and the torchmetrics states are gathered.
"""

from __future__ import annotations

import math
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from rs_lightning.analysis.metrics import ECDF_GRID, true_label_pa
from rs_lightning.analysis.plots import pa_ecdf_figure, save_figure
from rs_lightning.analysis.uncertainty import DEFAULT_BETA, Band, Counts, check_beta, pa_curve_band
from rs_lightning.data.quantize import first_off_grid
from rs_lightning.data.subset import evenly_spaced
from rs_lightning.metrics import AverageCertifiedRadius, CertifiedAccuracy, PAEcdf, PAEstimates
from rs_lightning.runs import certify_rows
from rs_lightning.smoothing import CertificationSpec, certify_dataset
from rs_lightning.smoothing.pipeline import at_sigma
from rs_lightning.smoothing.precision import check_precision_supported
from rs_lightning.smoothing.resolve import ModelFacts, resolve
from rs_lightning.smoothing.samplers import SAMPLERS, check_unused_settings, sampler_class
from rs_lightning.validation import ConfigError, require_at_least, require_positive

PREFIX = "callbacks.certification."

FIXED = ("mode", "split", "noise")
"""The spec's keys the callback does not take: it runs CERTIFY on the test split, with the module's training
noise (``method.noise``)."""
KEYS = tuple(key for key in CertificationSpec.keys(config=True) if key not in FIXED)
"""The spec's keys the callback takes, as in ``certify.py`` (:meth:`CertificationSpec.help`); their defaults
are the spec's (:meth:`CertificationSpec.defaults`) but for :data:`DEFAULTS`."""
DEFAULTS = {"n": 256}
"""Where the callback's defaults differ from the spec's: a training-time budget of 256 estimation draws per
input, where ``certify.py``'s 100,000 would cost every epoch a full certification."""


class CertificationCallback(pl.Callback):
    """Every ``every_n_epochs`` epochs (and after the last), certify ``num_inputs`` validation inputs.

    Logs ``val/acr``, ``val/certified_accuracy@{r}``, ``val/pa_mean``, ``val/abstain_rate`` and the
    figure ``val/pa_ecdf`` (W&B, TensorBoard; other loggers get a PNG in their log dir).

    Args:
        every_n_epochs: certification period in epochs.
        num_inputs: size of the fixed subset (every ``len(test) // num_inputs``-th input).
        radius_step: spacing of the logged certified-accuracy radii (up to the largest certifiable one);
            null = 0.25 for L2/L1 and 1/255 for L∞.
        beta: error probability of the logged simultaneous band of the p_A curve (``val/pa_band_halfwidth``,
            shaded in the ``val/pa_ecdf`` figure).
        **settings: the spec's keys of :data:`KEYS` (``sigma n0 n alpha seed batch_size precision
            channels_last compile sampling norm``), as in ``certify.py``, with the spec's defaults but
            :data:`DEFAULTS`; and a sampler's settings under its name (``sequential={"radii": [...],
            "first_look": ...}``). ``sigma`` None: the module's training sigma; ``norm`` None: L∞ for a
            method whose certified model is a pipeline (ARS certifies nothing else), else the training noise's
            own (set ``linf`` to log a Gaussian baseline in the same units as ARS). The noise is the
            module's training noise, lattice Gaussian noise for a Gaussian-trained module on 8-bit data
            (``eight_bit``), as in ``certify.py``. The spec is resolved with
            the module's facts by :func:`~rs_lightning.smoothing.resolve.resolve`, as in ``certify.py``.
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        num_inputs: int = 100,
        radius_step: float | None = None,
        beta: float = DEFAULT_BETA,
        **settings,
    ) -> None:
        require_at_least(PREFIX + "every_n_epochs", every_n_epochs, 1)
        try:
            self.beta = check_beta(beta)
        except ConfigError as err:
            raise ConfigError(PREFIX + "beta", beta, err.allowed) from None
        require_at_least(PREFIX + "num_inputs", num_inputs, 1)
        if radius_step is not None:
            require_positive(PREFIX + "radius_step", radius_step)
        if unknown := sorted(settings.keys() - set(KEYS) - SAMPLERS.keys()):
            raise TypeError(f"CertificationCallback got unexpected keyword arguments {unknown}")
        request = DEFAULTS | {key: value for key, value in settings.items() if key in KEYS}
        try:
            chosen = sampler_class(request.get("sampling") or "cohen").name
        except ConfigError as err:
            raise err.prefixed(PREFIX) from None
        sampler_settings = {name: value for name, value in settings.items() if name in SAMPLERS}
        check_unused_settings(sampler_settings, chosen, PREFIX)
        self.request = request | {"sampling": chosen, chosen: sampler_settings.get(chosen)}
        """The spec's keys as given (None: the module's), which :meth:`_spec` resolves."""
        self.spec = CertificationSpec.from_dict(self.request, prefix=PREFIX)
        """The request validated, before the module is known (σ unset, Gaussian noise stand in)."""
        self.every_n_epochs, self.num_inputs = every_n_epochs, num_inputs
        self.radius_step = radius_step
        self.norm = None if self.request.get("norm") is None else self.spec.norm
        self.last: dict | None = None
        """The most recent results: ``{"epoch", "indices", "metrics", "pa_ecdf"}`` (for tests and users)."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        check_precision_supported(self.spec.precision, trainer.strategy.root_device, key=PREFIX + "precision")

    @staticmethod
    def _model(pl_module: pl.LightningModule):
        return getattr(pl_module, "certified_model", pl_module.model)

    def _spec(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> CertificationSpec:
        """The request resolved with the module's facts (:func:`~rs_lightning.smoothing.resolve.resolve`, as
        ``certify.py`` does): its σ unless one was given (the callback's ``sigma=`` needs no override), its
        training noise, L∞ for a pipeline unless a norm was given, the sampler's settings at the data's
        input size; lattice noise by default for a Gaussian-trained model on 8-bit data."""
        facts = ModelFacts.of(
            self._model(pl_module),
            math.prod(trainer.datamodule.input_shape),
            train_sigma=pl_module.sigma,
            train_noise=getattr(pl_module, "noise", None),
        )
        on_grid = getattr(trainer.datamodule, "eight_bit", False)  # a user's own module: float noise
        return resolve(self.request, facts, override_sigma=True, on_grid=on_grid, prefix=PREFIX)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A spec the module cannot be certified under (a norm its pipeline's accounting does not cover, a
        sampler's grid above what n certifies, lattice noise on inputs off the 8-bit grid) is refused before
        the first epoch."""
        spec = self._spec(trainer, pl_module)
        if spec.certificate.distribution.grid_inputs:
            data = trainer.datamodule
            dataset = data.dataset(spec.split)
            if (off := first_off_grid(dataset, self.subset(len(dataset)))) is not None:
                raise ConfigError(
                    "noise",
                    spec.noise,
                    f"a noise for inputs off the 8-bit grid k/255 with {type(data).__name__}",
                    f"validation input idx {off[0]} has a pixel {off[1]:.3g} levels from one, and lattice "
                    "noise certifies inputs on the grid only: train with noise=gaussian, or on 8-bit data",
                )

    def _due(self, trainer: pl.Trainer) -> bool:
        epoch = trainer.current_epoch + 1
        return epoch % self.every_n_epochs == 0 or epoch >= (trainer.max_epochs or 0)

    def subset(self, dataset_size: int) -> list[int]:
        return evenly_spaced(dataset_size, self.num_inputs)

    def certify_command_args(self, dataset_size: int) -> dict:
        """The ``certify.py`` settings that reproduce this callback's numbers: the spec's protocol (nested
        settings as dotted keys) and the subset. The noise, and the norm unless one was given, are left to
        ``certify.py``'s null: the same default noise (lattice Gaussian noise for a Gaussian-trained model on
        8-bit data, else the training noise) and its own norm (L∞ for ARS), as here."""
        indices = self.subset(dataset_size)
        args: dict = {}
        for key, value in self.spec.protocol().items():
            if key in ("noise_block", "noise", "norm") or value is None:
                continue
            if (
                key == "sampler"
            ):  # as certify.py takes it (sequential.radii=...); null only where not the default
                defaults = type(self.spec.sampler).defaults()
                args |= {
                    f"{self.spec.sampling}.{k}": "null" if v is None else v
                    for k, v in value.items()
                    if v is not None or defaults[k] is not None
                }
            elif isinstance(value, dict):
                args |= {f"{key}.{k}": v for k, v in value.items() if v is not None}
            else:
                args[key] = value
        if self.norm is not None:
            args["norm"] = self.norm
        skip = indices[1] - indices[0] if len(indices) > 1 else 1
        return args | {"skip": skip, "start": 0, "max": indices[-1] + 1}

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._due(trainer):
            return
        spec = self._spec(trainer, pl_module)
        model = at_sigma(self._model(pl_module), spec.sigma)  # the module's own model is left as it is
        dataset = trainer.datamodule.dataset(spec.split)
        indices = self.subset(len(dataset))
        dim = math.prod(trainer.datamodule.input_shape)
        radii = spec.certificate.radius_grid(spec.sigma, spec.n, spec.bound_alpha, self.radius_step, dim)
        device = pl_module.device
        metrics = {
            "pa": PAEstimates(),
            "acr": AverageCertifiedRadius(),
            "cert": CertifiedAccuracy(radii),
            "ecdf": PAEcdf(ECDF_GRID),
        }
        for metric in metrics.values():
            metric.to(device)
        abstained = 0
        columns: list[dict] = []  # this rank's rows, for the p_A band
        was_training = pl_module.training
        for result, labels, seconds in certify_dataset(
            model,
            dataset,
            indices[trainer.global_rank :: trainer.world_size],
            spec,
            num_classes=trainer.datamodule.num_classes,
            device=device,
        ):
            rows = certify_rows(result, labels, seconds)
            column = {key: np.array([row[key] for row in rows]) for key in rows[0]}
            columns.append(column)
            pa = true_label_pa(column["correct"], column["pA_hat"])
            abstained += int((column["predict"] < 0).sum())
            for metric in metrics.values():
                metric.update(
                    torch.as_tensor(column["idx"]),
                    torch.as_tensor(column["correct"].astype(bool)),
                    torch.as_tensor(column["radius"]),
                    torch.as_tensor(pa),
                )
        pl_module.train(was_training)
        _, pa = metrics["pa"].compute()
        values = {"val/acr": metrics["acr"].compute(), "val/pa_mean": pa.mean()}
        for r, acc in zip(radii, torch.atleast_1d(metrics["cert"].compute()), strict=True):
            values[f"val/certified_accuracy@{r:g}"] = acc
        abstained = pl_module.all_gather(torch.tensor(abstained, device=device)).sum()
        values["val/abstain_rate"] = abstained.double() / len(indices)
        for key, value in values.items():
            pl_module.log(key, value.float(), sync_dist=False, rank_zero_only=False)
        ecdf = torch.atleast_1d(metrics["ecdf"].compute()).cpu().numpy()
        band = self._band(columns, spec)
        half_width = torch.tensor(band.max_half_width, device=device)
        pl_module.log("val/pa_band_halfwidth", half_width, sync_dist=False, rank_zero_only=False)
        self.last = {
            "epoch": trainer.current_epoch,
            "indices": indices,
            "metrics": {k: float(v) for k, v in values.items()},
            "pa_ecdf": {"x": ECDF_GRID.tolist(), "y": ecdf.tolist()},
            "pa": pa.cpu().numpy(),
            "pa_band": band,
        }
        if trainer.is_global_zero:
            self._log_figure(trainer, pa.cpu().numpy(), band)

    def _band(self, columns: list[dict], spec: CertificationSpec) -> Band:
        """The simultaneous (1 − beta) band of the p_A curve from every rank's rows
        (:func:`~rs_lightning.analysis.uncertainty.pa_curve_band`)."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, columns)
            columns = [c for part in gathered for c in part]
        rows = {key: np.concatenate([c[key] for c in columns]) for key in columns[0]}
        looks = spec.sampler.looks(spec)
        return pa_curve_band(Counts.from_rows(rows, looks=looks), self.beta)

    def _log_figure(self, trainer: pl.Trainer, pa: np.ndarray, band: Band) -> None:
        label = f"epoch {trainer.current_epoch}, n={self.spec.n}"
        for logger in trainer.loggers:
            fig = pa_ecdf_figure({label: pa}, bands={label: band})
            if isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log(
                    {"val/pa_ecdf": wandb.Image(fig), "trainer/global_step": trainer.global_step}
                )
            elif isinstance(logger, TensorBoardLogger):
                logger.experiment.add_figure("val/pa_ecdf", fig, global_step=trainer.global_step)
            elif logger.log_dir:
                folder = Path(logger.log_dir) / "pa_ecdf"
                folder.mkdir(parents=True, exist_ok=True)
                save_figure(fig, folder / f"epoch_{trainer.current_epoch:04d}.png")
                continue
            import matplotlib.pyplot as plt

            plt.close(fig)
