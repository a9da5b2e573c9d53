"""The data-module interface the rest of rs-lightning relies on.

Every module yields ``(x, y)`` with x a float32 CHW tensor in [0,1] (``ToTensor`` convention, no
normalization: that is the model's first layer, as in Cohen et al.'s code) and y an int. Validation uses the
**test** split, as Cohen et al.'s train.py does.
"""

from __future__ import annotations

import os
import signal
import warnings
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from rs_lightning.registry import Registry
from rs_lightning.validation import ConfigError

SPLITS = ("train", "test")


def worker_init(worker_id: int) -> None:
    """A DataLoader worker ignores Ctrl-C: a terminal sends it to the whole process group, and training,
    which stops at the end of its current step (:class:`~rs_lightning.callbacks.CheckpointOnInterrupt`),
    still needs its workers until then (they end with their loader, or with the training process). Seeds the
    worker as Lightning's own ``worker_init_fn`` would (``seed_everything(workers=True)``), which a loader
    with a ``worker_init_fn`` does not get."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if int(os.environ.get("PL_SEED_WORKERS", 0)):
        pl_worker_init_function(worker_id)


class IndexedDataset(Dataset):
    """Wraps a dataset so that items are ``(x, y, index)``: for methods with per-sample state."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, i: int):
        x, y = self.dataset[i]
        return x, y, i


class EpochShuffle(RandomSampler):
    """The training shuffle, able to replay a pass from a point inside it.

    Each pass draws its seed from the global torch RNG exactly as torch's :class:`RandomSampler` does (one
    int64, then ``randperm`` from a generator seeded with it), so a run's data order is that of a plain
    ``shuffle=True`` loader; :attr:`pass_seed` is the seed of the pass in progress. ``replay(seed, skip)``
    makes the next pass use ``seed`` without drawing and leave out its first ``skip`` indices: a resume
    from a checkpoint taken mid-epoch then sees the rest of that epoch's batches in the order the
    uninterrupted run saw them (Lightning restarts a plain loader from its start)."""

    def __init__(self, data_source: Dataset) -> None:
        super().__init__(data_source)  # type: ignore[arg-type]
        self.pass_seed: int | None = None
        self._replay: tuple[int, int] | None = None

    def replay(self, seed: int, skip: int) -> None:
        self._replay = (int(seed), int(skip))

    def __iter__(self):
        if self._replay is not None:
            (seed, skip), self._replay = self._replay, None
        else:
            seed, skip = int(torch.empty((), dtype=torch.int64).random_().item()), 0
        self.pass_seed = seed
        self.generator = torch.Generator()
        self.generator.manual_seed(seed)
        try:
            indices = super().__iter__()
            for _ in range(skip):
                next(indices, None)
            yield from indices
        finally:
            self.generator = None


class DatasetNotFoundError(FileNotFoundError):
    """The data is not on disk; the message names the paths searched and how to get the data."""


class DataFormatError(ValueError):
    """A data file whose content is unusable (wrong arrays, dtype, shape, labels); the message names the
    file, the array and the fix."""


PROJECT_DATA_MODULES: list[type[RSDataModule]] = []
"""Every data module defined in a module of this package (``rs_lightning.data.*``; not ``_private`` ones), in
the order they were defined: what a checkpoint may name (:func:`data_modules`). A class joins by being defined
here, so a new dataset is one file in rs_lightning/data/ plus its conf/data/ config."""


def data_modules() -> Registry:
    """The :class:`~rs_lightning.registry.Registry` of :data:`PROJECT_DATA_MODULES` (all of them are defined
    once ``rs_lightning.data`` is imported: its ``__init__`` imports every module of the package)."""
    return Registry("data module", RSDataModule, list(PROJECT_DATA_MODULES))


class RSDataModule(pl.LightningDataModule):
    """Base data module: splits ``train`` (augmented) and ``test`` (never augmented).

    After ``prepare_data()`` and ``setup()`` these attributes are set: ``num_classes``, ``class_names``,
    ``input_shape`` (C, H, W), ``mean`` and ``std`` (None = identity normalization). Subclasses implement
    ``_load() -> {split: Dataset}`` (setting the attributes) and may extend ``describe()``.

    Args:
        batch_size: training batch size.
        num_workers: DataLoader worker processes.
        val_batch_size: validation batch size (defaults to ``batch_size``).
        normalize: False drops the dataset's mean/std normalization layer (identity instead).
    """

    name: ClassVar[str] = "base"
    eight_bit: ClassVar[bool] = False
    """Whether every input the module serves is on the 8-bit pixel grid k/255 (uint8 images, not resized):
    lattice noise is then the default certification noise (:func:`~rs_lightning.smoothing.resolve.
    default_noise`). False unless a module knows it: float data stay on float noise."""
    num_classes: int
    class_names: list[str]
    input_shape: tuple[int, int, int]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith("rs_lightning.data.") and not cls.__name__.startswith("_"):
            PROJECT_DATA_MODULES.append(cls)

    def __init__(
        self,
        batch_size: int = 256,
        num_workers: int = 0,
        val_batch_size: int | None = None,
        normalize: bool = True,
    ) -> None:
        super().__init__()
        self.normalize = bool(normalize)
        if int(batch_size) < 1:
            raise ConfigError("data.batch_size", batch_size, "an integer >= 1")
        if val_batch_size is not None and int(val_batch_size) < 1:
            raise ConfigError("data.val_batch_size", val_batch_size, "an integer >= 1 or null")
        if int(num_workers) < 0:
            raise ConfigError("data.num_workers", num_workers, "an integer >= 0")
        self.batch_size = int(batch_size)
        self.num_workers = int(num_workers)
        self.val_batch_size = int(val_batch_size) if val_batch_size is not None else self.batch_size
        self._datasets: dict[str, Dataset] | None = None
        self.train_with_index = False
        """If True, training batches are ``(x, y, index)`` (set by methods that keep per-sample state)."""
        self.train_sampler: Sampler | None = None
        """If set (by a method that resamples its data, e.g. ACR gaming), the training loader draws its
        indices from it instead of shuffling."""
        self._shuffle: EpochShuffle | None = None
        self._resume_pass: dict[str, int] | None = None

    def _load(self) -> dict[str, Dataset]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        """Load the splits once; later calls are free."""
        if self._datasets is None:
            datasets = self._load()
            self._check_labels(datasets)
            self._datasets = datasets
            if not self.normalize:  # e.g. MACER's models read raw [0,1] inputs (RuntianZ/macer model.py)
                self.mean = self.std = None

    def _check_labels(self, datasets: dict[str, Dataset]) -> None:
        """Every split that holds its labels as a tensor (:class:`~rs_lightning.data.arrays.ArrayDataset`)
        must have them in 0..num_classes-1: a label the model has no output for is a DataFormatError, before
        a model is built for the data."""
        for split, dataset in datasets.items():
            labels = getattr(dataset, "labels", None)
            if not isinstance(labels, torch.Tensor) or labels.numel() == 0:
                continue
            low, high = int(labels.min()), int(labels.max())
            if low < 0 or high >= int(self.num_classes):
                where = getattr(self, "path", None) or getattr(self, "root", None)
                raise DataFormatError(
                    f"{self.name}{f' ({where})' if where else ''}: the {split} split has label "
                    f"{low if low < 0 else high}, but the data has {self.num_classes} classes (labels 0.."
                    f"{int(self.num_classes) - 1}): fix the labels in its files"
                )

    def dataset(self, split: str) -> Dataset:
        """The ``train`` (augmented) or ``test`` (not augmented) dataset; calls ``setup()`` if needed."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
        self.setup()
        assert self._datasets is not None
        if split not in self._datasets:
            raise DatasetNotFoundError(f"{self.name}: split {split!r} is not available ({self.describe()})")
        return self._datasets[split]

    def _loader(
        self,
        dataset: Dataset,
        batch_size: int,
        sampler: Sampler | None = None,
        generator: torch.Generator | None = None,
    ) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            sampler=sampler,
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
            worker_init_fn=worker_init if self.num_workers > 0 else None,
            generator=generator,
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled by :class:`EpochShuffle` (or by :attr:`train_sampler`). A resume from a mid-epoch
        checkpoint (:meth:`load_state_dict`) replays that epoch's order past the batches already trained,
        and the loader's worker base seed comes from its own generator instead of the global RNG, which
        the checkpoint restored to where the uninterrupted run had already drawn it."""
        dataset = self.dataset("train")
        if self.train_with_index:
            dataset = IndexedDataset(dataset)
        self._shuffle, generator = None, None
        sampler = self.train_sampler
        if sampler is None:
            sampler = self._shuffle = EpochShuffle(dataset)
            resume, self._resume_pass = self._resume_pass, None
            if resume is not None:
                self._shuffle.replay(resume["seed"], resume["batches_done"] * self.batch_size)
                generator = torch.Generator()
                generator.manual_seed(resume["seed"])
        return self._loader(dataset, self.batch_size, sampler=sampler, generator=generator)

    def state_dict(self) -> dict[str, Any]:
        """Saved in every checkpoint (Lightning stores it under the class's name): for a checkpoint taken
        inside an epoch (an interrupt, ``every_n_train_steps``), the epoch's shuffle seed and the batches
        trained, so a resume goes on with the same batches (:meth:`train_dataloader`); empty at an epoch's
        end, or when the order is not :class:`EpochShuffle`'s (a method's :attr:`train_sampler`)."""
        trainer = getattr(self, "trainer", None)
        if trainer is None or trainer.state.fn != "fit" or self._shuffle is None:
            return {}
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed
        if self._shuffle.pass_seed is None or not 0 < done < trainer.num_training_batches:
            return {}
        return {
            "train_pass_seed": self._shuffle.pass_seed,
            "train_batches_done": int(done),
            "train_batch_size": self.batch_size,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Takes :meth:`state_dict`'s mid-epoch position for the next :meth:`train_dataloader`; refuses
        (ConfigError) a resume that changed the batch size inside an epoch."""
        if not state_dict:
            return
        values = [state_dict.get(k) for k in ("train_pass_seed", "train_batches_done", "train_batch_size")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values) or values[1] < 0:
            raise ConfigError(
                "ckpt_path",
                "the checkpoint",
                "a checkpoint written by train.py",
                f"its data position {state_dict!r} is not three integers",
            )
        seed, done, batch_size = values
        if batch_size != self.batch_size:
            raise ConfigError(
                "data.batch_size",
                self.batch_size,
                f"{batch_size}, the batch size of the checkpoint",
                "it was taken inside an epoch, which goes on with the same batches",
            )
        self._resume_pass = {"seed": seed, "batches_done": done}
        # Lightning warns that a plain loader restarts the epoch; this one goes on where it stopped
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")

    def val_dataloader(self) -> DataLoader:
        """The test split, unshuffled (Cohen et al. validate on the test set)."""
        return self._loader(self.dataset("test"), self.val_batch_size)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.dataset("test"), self.val_batch_size)

    def describe(self) -> dict[str, Any]:
        """JSON-able description recorded in result files (subclasses add root/path/source)."""
        self.setup()
        assert self._datasets is not None
        return {
            "name": self.name,
            "num_classes": self.num_classes,
            "input_shape": list(self.input_shape),
            "mean": list(self.mean) if self.mean is not None else None,
            "std": list(self.std) if self.std is not None else None,
            "splits": {k: len(v) for k, v in self._datasets.items()},  # type: ignore[arg-type]
        }
