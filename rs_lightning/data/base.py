"""The data-module interface the rest of rs-lightning relies on.

Every module yields ``(x, y)`` with x a float32 CHW tensor in [0,1] (``ToTensor`` convention, no
normalization: that is the model's first layer, as in Cohen et al.'s code) and y an int. Validation uses the
**test** split, as Cohen et al.'s train.py does.
"""

from __future__ import annotations

import os
import signal
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader, Dataset, Sampler

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


class DatasetNotFoundError(FileNotFoundError):
    """The data is not on disk; the message names the paths searched and how to get the data."""


class DataFormatError(ValueError):
    """A data file whose content is unusable (wrong arrays, dtype, shape, labels); the message names the
    file, the array and the fix."""


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
    num_classes: int
    class_names: list[str]
    input_shape: tuple[int, int, int]
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None

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
        self, dataset: Dataset, batch_size: int, shuffle: bool, sampler: Sampler | None = None
    ) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=batch_size,
            shuffle=shuffle and sampler is None,
            sampler=sampler,
            drop_last=False,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            pin_memory=torch.cuda.is_available(),
            worker_init_fn=worker_init if self.num_workers > 0 else None,
        )

    def train_dataloader(self) -> DataLoader:
        dataset = self.dataset("train")
        return self._loader(
            IndexedDataset(dataset) if self.train_with_index else dataset,
            self.batch_size,
            True,
            sampler=self.train_sampler,
        )

    def val_dataloader(self) -> DataLoader:
        """The test split, unshuffled (Cohen et al. validate on the test set)."""
        return self._loader(self.dataset("test"), self.val_batch_size, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.dataset("test"), self.val_batch_size, shuffle=False)

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
