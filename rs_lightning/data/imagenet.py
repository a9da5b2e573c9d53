"""ImageNet from class-subfolder trees ``root/train`` and ``root/val`` (locuslab/smoothing code/datasets.py).

Train: RandomResizedCrop(224), RandomHorizontalFlip, ToTensor. Test: Resize(256), CenterCrop(224), ToTensor.
Labels follow ImageFolder's sorted class order. ``val`` is required (certification needs only it);
``train`` is loaded when present.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch.utils.data import Dataset
from torchvision import datasets, transforms

from rs_lightning.data.base import DataFormatError, DatasetNotFoundError, RSDataModule

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class ImageNetDataModule(RSDataModule):
    """ImageNet (or any ImageFolder tree) with Cohen et al.'s transforms and ImageNet mean/std.

    Args:
        root: folder with ``train/`` and ``val/``, each holding one subfolder per class.
        image_size: crop size (224).
        resize_size: test-time resize before the center crop (256).
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size`` (see ``RSDataModule``).
    """

    name = "imagenet"
    eight_bit = False  # Resize(256) interpolates between levels: lattice noise needs quantize=true

    def __init__(self, root: str, image_size: int = 224, resize_size: int = 256, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = str(root)
        self.image_size, self.resize_size = int(image_size), int(resize_size)
        self.input_shape = (3, self.image_size, self.image_size)
        self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD

    def _folder(self, split: str, transform: transforms.Compose) -> datasets.ImageFolder:
        path = Path(self.root) / split
        try:
            return datasets.ImageFolder(str(path), transform=transform)
        except FileNotFoundError as err:  # missing folder, or no class subfolders / images
            raise DatasetNotFoundError(
                f"imagenet: no image class folders in {path.resolve()} ({err}). Set "
                "data.root=/path/to/imagenet with train/ and val/ class subfolders (val rearranged into "
                "class folders, e.g. with valprep.sh)."
            ) from err

    def _load(self) -> dict[str, Dataset]:
        size = self.image_size
        test = self._folder(
            "val",
            transforms.Compose(
                [transforms.Resize(self.resize_size), transforms.CenterCrop(size), transforms.ToTensor()]
            ),
        )
        out: dict[str, Dataset] = {"test": test}
        if (Path(self.root) / "train").is_dir():
            train = self._folder(
                "train",
                transforms.Compose(
                    [
                        transforms.RandomResizedCrop(size),
                        transforms.RandomHorizontalFlip(),
                        transforms.ToTensor(),
                    ]
                ),
            )
            if train.classes != test.classes:
                raise DataFormatError(
                    f"imagenet: {Path(self.root) / 'train'} has {len(train.classes)} class folders and "
                    f"{Path(self.root) / 'val'} {len(test.classes)}, or their names differ, so labels "
                    "would not match: give train/ and val/ the same class subfolders"
                )
            out["train"] = train
        self.class_names = list(test.classes)
        self.num_classes = len(test.classes)
        return out

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "root": self.root}
