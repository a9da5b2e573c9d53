"""MNIST and Fashion-MNIST (28x28 gray, 10 classes, identity normalization, no augmentation).

MNIST: ToTensor only, no normalization (jh-jeong/smoothing-consistency code/datasets.py).
Fashion-MNIST falls back to the Debian package ``dataset-fashion-mnist`` (IDX .gz files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from torch.utils.data import Dataset
from torchvision import datasets

from rs_lightning.data.arrays import ArrayDataset, read_idx
from rs_lightning.data.base import DataFormatError, DatasetNotFoundError, RSDataModule

IDX_FILES = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


class MNISTDataModule(RSDataModule):
    """torchvision MNIST under ``root`` (``root/MNIST/raw``), downloaded only if ``download=True``.

    Args:
        root: torchvision dataset root (relative to the working directory).
        download: download in ``prepare_data()`` (needs internet).
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "mnist"
    eight_bit = True  # uint8 images served as they are (Fashion-MNIST too)
    tv_class: ClassVar[type[datasets.MNIST]] = datasets.MNIST

    def __init__(self, root: str = "data", download: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = str(root)
        self.download = bool(download)
        self.source = ""
        self.num_classes = 10
        self.class_names = [str(i) for i in range(10)]
        self.input_shape = (1, 28, 28)

    @property
    def raw_folder(self) -> Path:
        """Where torchvision looks for the files."""
        return Path(self.root) / self.tv_class.__name__ / "raw"

    def prepare_data(self) -> None:
        if self.download:
            for train in (True, False):
                self.tv_class(self.root, train=train, download=True)

    def _torchvision(self) -> dict[str, Dataset] | None:
        try:
            sets = {
                s: self.tv_class(self.root, train=s == "train", download=False) for s in ("train", "test")
            }
        except RuntimeError:  # torchvision: "Dataset not found. You can use download=True ..."
            return None
        self.source = str(self.raw_folder)
        return {s: ArrayDataset(d.data[:, None], d.targets) for s, d in sets.items()}

    def _load(self) -> dict[str, Dataset]:
        loaded = self._torchvision()
        if loaded is None:
            raise DatasetNotFoundError(
                f"{self.name}: no data in {self.raw_folder.resolve()}. "
                "Set data.download=true (needs internet), "
                f"set data.root=/dir/containing/{self.tv_class.__name__}, or use data=npz with an .npz copy "
                "(e.g. data.path=shared/data/mnist.npz)."
            )
        return loaded

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "root": self.root, "source": self.source}


class FashionMNISTDataModule(MNISTDataModule):
    """Fashion-MNIST from torchvision under ``root``, else from the Debian package's IDX files.

    Args:
        root: torchvision dataset root (``root/FashionMNIST/raw``).
        download: download with torchvision in ``prepare_data()`` (needs internet).
        debian_dir: where ``apt-get install dataset-fashion-mnist`` puts the four IDX .gz files.
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "fashion_mnist"
    tv_class = datasets.FashionMNIST

    def __init__(
        self,
        root: str = "data",
        download: bool = False,
        debian_dir: str = "/usr/share/datasets/fashion-mnist",
        **kwargs: Any,
    ) -> None:
        super().__init__(root=root, download=download, **kwargs)
        self.debian_dir = str(debian_dir)
        self.class_names = list(datasets.FashionMNIST.classes)

    def _debian(self) -> dict[str, Dataset] | None:
        folder = Path(self.debian_dir)
        if not all((folder / f).is_file() for pair in IDX_FILES.values() for f in pair):
            return None
        self.source = str(folder)
        out = {}
        for split, (image_file, label_file) in IDX_FILES.items():
            images, labels = read_idx(folder / image_file), read_idx(folder / label_file)
            problem = None
            if images.ndim != 3 or images.shape[1:] != (28, 28):
                problem = f"{folder / image_file} holds shape {images.shape}, not (N, 28, 28) images"
            elif labels.ndim != 1 or len(labels) != len(images):
                problem = (
                    f"{folder / label_file} holds {labels.shape}, not one label per image ({len(images)})"
                )
            elif labels.size and labels.max() >= self.num_classes:
                problem = f"{folder / label_file} has label {int(labels.max())}, not < {self.num_classes}"
            if problem:
                raise DataFormatError(
                    f"{self.name}: {problem}; reinstall the files (`apt-get install --reinstall "
                    "dataset-fashion-mnist`) or set data.debian_dir to an intact copy"
                )
            out[split] = ArrayDataset(images[:, None], labels)
        return out

    def _load(self) -> dict[str, Dataset]:
        loaded = self._torchvision() or self._debian()
        if loaded is None:
            raise DatasetNotFoundError(
                f"{self.name}: no data in {self.raw_folder.resolve()} nor in {self.debian_dir} "
                f"(needs {', '.join(f for pair in IDX_FILES.values() for f in pair)}). "
                "Run `apt-get install dataset-fashion-mnist`, set data.debian_dir=/path/to/idx/files, "
                "or set data.download=true (needs internet)."
            )
        return loaded
