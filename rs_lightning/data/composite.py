"""Objects pasted onto larger canvases: the data of Adaptive Randomized Smoothing (Lyu et al.,
NeurIPS 2024; ubc-systopia/adaptive-randomized-smoothing ``src/dataset.py``).

A source data module's s×s images (the objects) are placed on k×k canvases over a background: BG-20k-style
photographs (``background=folder``, the ARS "CIFAR-10 20kBG" benchmark) or clutter made of fragments of
other training images (``background=clutter``, cluttered MNIST after Mnih et al., NeurIPS 2014 / Ba, Mnih &
Kavukcuoglu, ICLR 2015, which runs offline). Train items get a fresh background and position on every
access, drawn from the torch global RNG (seeded per DataLoader worker by torch, and restored with the
checkpoint's RNG state, so resumes are exact). Unlike the reference, which redraws test items on every
access (its ``src/dataset.py``), the test split is materialized once at setup: item i's background and
position come from ``numpy.random.default_rng([seed, 0, i])``, so every method is certified on identical
images.

The source's config is a plain mapping whose ``target`` key names a registered data module
(``rs_lightning.data.registry``): not ``_target_``, because a config read from a checkpoint may hold no
``_``-keys below its top level (``rs_lightning.registry``), so certify.py could not rebuild it otherwise.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from PIL import Image, UnidentifiedImageError
from torch.utils.data import Dataset

from rs_lightning.data.arrays import ArrayDataset
from rs_lightning.data.base import DataFormatError, DatasetNotFoundError, RSDataModule, data_modules
from rs_lightning.data.npz import _floats
from rs_lightning.registry import RegistryError
from rs_lightning.validation import ConfigError, require_at_least

EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp")
CHOICES = {"background": ("folder", "clutter"), "blend": ("paste", "max")}
CHOICES["placement"] = ("edges", "uniform", "center")
POOL_SIZE, POOL_BYTES = 5000, 256 << 20
"""At most this many (and bytes of) un-augmented train images are kept for fragments and object statistics."""
STATS_SAMPLES = 256
"""Generated clutter canvases whose pixels give the background statistics."""
DESCRIBED = ("canvas", "background", "background_dir", "max_backgrounds", "blend", "placement")
DESCRIBED += ("clutter_fragments", "seed", "test_size", "test_sha256")
_TEST, _POOL, _STATS, _FOLDER = 0, 1, 2, 3  # purposes in the numpy seeds [seed, purpose, i]


def _ints(rng: np.random.Generator | None, highs: Sequence[int]) -> list[int]:
    """One uniform integer in [0, h) per h (every h >= 1); ``rng=None`` draws from the torch global RNG."""
    if rng is not None:
        return [int(v) for v in rng.integers(0, np.asarray(highs, dtype=np.int64))]
    u = torch.rand(len(highs), dtype=torch.float64).tolist()
    return [min(int(v * h), h - 1) for v, h in zip(u, highs, strict=True)]


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.uint8 else x.clamp(0, 1).mul(255).round_().to(torch.uint8)


def channel_stats(images: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and (population) variance of uint8 (N, C, H, W) images in [0,1] units."""
    total = torch.zeros(images.shape[1], dtype=torch.float64)
    squares = torch.zeros_like(total)
    for chunk in images.split(256):
        x = chunk.to(torch.float64).div_(255)
        total += x.sum((0, 2, 3))
        squares += x.square().sum((0, 2, 3))
    count = images.numel() / images.shape[1]
    mean = (total / count).numpy()
    return mean, np.maximum((squares / count).numpy() - mean**2, 0.0)


@dataclass
class Layout:
    """How one canvas is made: background, object position and blend.

    Backgrounds are folder images (uint8 (B, C, k, k)) or, with ``pool`` (uint8 (P, C, H, W) train images,
    ``pool_index`` their train indices), clutter of ``fragments`` f×f fragments.
    """

    k: int
    obj: tuple[int, int, int]
    placement: str
    blend: str
    backgrounds: torch.Tensor | None = None
    pool: torch.Tensor | None = None
    pool_index: np.ndarray | None = None
    fragments: int = 0
    f: int = 0

    def _place_highs(self) -> list[int]:
        ph, pw = self.k - self.obj[1], self.k - self.obj[2]
        return {"edges": [2, 2, max(ph, 1), max(pw, 1)], "uniform": [ph + 1, pw + 1], "center": []}[
            self.placement
        ]

    def _position(self, d: list[int]) -> tuple[int, int]:
        """Top-left corner. ``edges`` (the reference's placement): a coin picks the axis, a coin puts that
        coordinate at 0 or at the pad (the object touches one side), the other is uniform in [0, pad)."""
        ph, pw = self.k - self.obj[1], self.k - self.obj[2]
        if self.placement == "center":
            return ph // 2, pw // 2
        if self.placement == "uniform":
            return d[0], d[1]
        axis, side, top, left = d
        return (side * ph, left if pw else 0) if axis == 0 else (top if ph else 0, side * pw)

    def background_highs(self) -> list[int]:
        if self.pool is None:
            return [len(self.backgrounds)]  # type: ignore[arg-type]
        f, (_, _, sh, sw) = self.f, self.pool.shape
        return [len(self.pool), sh - f + 1, sw - f + 1, self.k - f + 1, self.k - f + 1] * self.fragments

    def background(self, d: list[int], exclude: int | None = None) -> torch.Tensor:
        """A uint8 (C, k, k) background: a folder image, or a black canvas with ``fragments`` f×f pieces of
        random train images (never of train image ``exclude``) at uniform positions, blended by max."""
        if self.pool is None:
            return self.backgrounds[d[0]].clone()  # type: ignore[index]
        canvas, f = torch.zeros((self.obj[0], self.k, self.k), dtype=torch.uint8), self.f
        for j, sy, sx, ty, tx in zip(*[iter(d)] * 5, strict=True):
            if exclude is not None and len(self.pool) > 1 and self.pool_index[j] == exclude:  # type: ignore[index]
                j = (j + 1) % len(self.pool)
            region = canvas[:, ty : ty + f, tx : tx + f]
            region.copy_(torch.maximum(region, self.pool[j, :, sy : sy + f, sx : sx + f]))
        return canvas

    def compose(self, obj: torch.Tensor, rng: np.random.Generator | None, exclude: int | None = None):
        """``obj`` (uint8, or float in [0,1]) on a fresh canvas of its dtype; ``rng=None``: torch RNG."""
        place = self._place_highs()
        d = _ints(rng, place + self.background_highs())
        top, left = self._position(d[: len(place)])
        canvas = self.background(d[len(place) :], exclude)
        if obj.dtype != torch.uint8:
            canvas = canvas.to(obj.dtype).div_(255)
        region = canvas[:, top : top + self.obj[1], left : left + self.obj[2]]
        region.copy_(obj if self.blend == "paste" else torch.maximum(region, obj))
        return canvas


class CompositeTrainDataset(Dataset):
    """Source train item i (with the source's augmentation) on a fresh canvas at every access."""

    def __init__(self, source: Dataset, layout: Layout) -> None:
        self.source, self.layout = source, layout

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        x, y = self.source[i]
        return self.layout.compose(x, None, exclude=i), int(y)


def build_source(config: Mapping[str, Any] | RSDataModule) -> RSDataModule:
    """The source: an instance, or a mapping ``{target: <a registered data module>, **args}`` (looked up in
    :func:`~rs_lightning.data.base.data_modules`, never imported: a checkpoint's config names it)."""
    registry = data_modules()
    if isinstance(config, RSDataModule):
        return config
    config = dict(OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else config)
    target = config.pop("target", None)
    try:
        cls = registry.lookup(target, "data.source")
    except RegistryError as err:
        allowed = "a registered data module (e.g. rs_lightning.data.npz.NpzDataModule)"
        raise ConfigError("data.source.target", target, allowed, str(err)) from err
    try:
        return registry.build({"_target_": target, **config}, "data.source")
    except RegistryError as err:
        given = {"target": target, **config}
        raise ConfigError(
            "data.source", given, f"plain arguments that {cls.__name__} accepts", str(err)
        ) from err


class CompositeDataModule(RSDataModule):
    """Source objects on k×k canvases over folder images or clutter (ARS data, ``src/dataset.py``).

    Normalization is the reference's area-weighted mixture: with ρ = s_H·s_W / k², mean = ρ·mean_obj +
    (1−ρ)·mean_bg and std = sqrt(ρ·var_obj + (1−ρ)·var_bg) (the between-component term is left out, as in
    the reference). Object statistics are the source's mean/std, or computed from up to 5000 train images
    when it has none; background statistics come from the loaded train backgrounds (folder) or 256 seeded
    clutter canvases. Memory: up to ``max_backgrounds`` k×k images per background folder, the train-image
    pool (≤ 5000 images, ≤ 256 MiB), and the materialized test set (test_size × C × k × k bytes).

    Args:
        source: the objects' data module: a mapping with ``target`` (its class) and its arguments, or an
            instance. Train objects keep the source's augmentation; test objects are its test split.
        canvas: k, the canvas side; a multiple of 8 (the ARS mask UNet) and at least the object's H and W.
        background: ``folder`` (images in ``background_dir``) or ``clutter`` (fragments of train images).
        background_dir: folder of .jpg/.jpeg/.png/.bmp/.webp images, read as gray (C=1) or RGB (C=3) and
            resized to k×k (bilinear). With subfolders ``train/`` and ``testval/`` (BG-20k), train items use
            train/ and test items testval/; otherwise both splits use the whole folder.
        max_backgrounds: at most this many images per folder are loaded (a seeded subset); null = all.
        blend: ``paste`` overwrites the object's region (the reference); ``max`` takes the pixel-wise max.
        placement: ``edges`` (the reference: the object touches one side), ``uniform`` or ``center``.
        clutter_fragments: fragments per clutter canvas (train fragments for both splits: no test leak).
        fragment_size: fragment side f; null = round(min(s_H, s_W) / 3) (9 for 28×28).
        seed: seed of the test set, of the subsets and of the statistics.
        test_size: materialize only the first ``test_size`` source test images; null = all.
        mean: per-channel mean overriding the mixture (with ``std``), or null.
        std: per-channel std overriding the mixture (with ``mean``), or null.
        **kwargs: ``batch_size``, ``num_workers``, ``val_batch_size``, ``normalize`` (``RSDataModule``).
    """

    name = "composite"

    @property
    def eight_bit(self) -> bool:  # uint8 canvases and backgrounds: on the grid when the objects are
        return self.source.eight_bit

    def __init__(
        self,
        source: Mapping[str, Any] | RSDataModule,
        canvas: int = 64,
        background: str = "folder",
        background_dir: str | None = None,
        max_backgrounds: int | None = 2000,
        blend: str = "paste",
        placement: str = "edges",
        clutter_fragments: int = 8,
        fragment_size: int | None = None,
        seed: int = 0,
        test_size: int | None = None,
        mean: Sequence[float] | None = None,
        std: Sequence[float] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        require_at_least("data.canvas", canvas, 8)
        if canvas % 8:
            low = canvas // 8 * 8
            raise ConfigError(
                "data.canvas",
                canvas,
                "a multiple of 8 (the ARS mask UNet needs H and W divisible by 8)",
                f"Use data.canvas={low} or data.canvas={low + 8}",
            )
        for key, value in (("background", background), ("blend", blend), ("placement", placement)):
            if value not in CHOICES[key]:
                raise ConfigError(f"data.{key}", value, " or ".join(CHOICES[key]))
        if background == "folder" and not background_dir:
            raise ConfigError("data.background_dir", background_dir, "a folder with background=folder")
        require_at_least("data.clutter_fragments", clutter_fragments, 0)
        optional = {
            "max_backgrounds": max_backgrounds,
            "fragment_size": fragment_size,
            "test_size": test_size,
        }
        for key, value in optional.items():
            if value is not None:
                require_at_least(f"data.{key}", value, 1)
        if (mean is None) != (std is None):
            given, other = ("data.mean", "data.std") if std is None else ("data.std", "data.mean")
            raise ConfigError(other, None, f"given together with {given}", "Give both or neither")
        self.source = build_source(source)
        self.canvas, self.background, self.blend, self.placement = int(canvas), background, blend, placement
        self.background_dir = str(background_dir) if background_dir else None
        self.max_backgrounds, self.clutter_fragments = max_backgrounds, int(clutter_fragments)
        self.fragment_size, self.seed, self.test_size = fragment_size, int(seed), test_size
        self._mean_arg, self._std_arg = mean, std
        self.test_sha256 = ""
        self.fragment_side: int | None = None
        """The fragment side f in use (clutter only; set at setup)."""

    def prepare_data(self) -> None:
        self.source.prepare_data()

    def _pool(self, train: Dataset) -> tuple[torch.Tensor, np.ndarray]:
        """Up to POOL_SIZE un-augmented train images (a seeded subset) as uint8, and their indices."""
        n, c, h, w = len(train), *self.source.input_shape  # type: ignore[arg-type]
        size = min(n, POOL_SIZE, max(1, POOL_BYTES // (c * h * w)))
        rng = np.random.default_rng([self.seed, _POOL, 0])
        index = np.arange(n) if size == n else np.sort(rng.choice(n, size, replace=False))
        if isinstance(train, ArrayDataset) and train.scale == 255.0:
            return train.images[torch.as_tensor(index)], index
        with torch.random.fork_rng(devices=[]):  # a source transform must not change the global RNG
            torch.manual_seed(self.seed)
            return torch.stack([_to_uint8(train[int(i)][0]) for i in index]), index

    def _background_files(self) -> dict[str, list[Path]]:
        """Per split, the background files: BG-20k's train/ and testval/, or the whole folder for both (a
        seeded subset of at most ``max_backgrounds``). Checked before the source is loaded."""
        root = Path(str(self.background_dir))
        if not root.is_dir():
            raise DatasetNotFoundError(
                f"composite: background folder {root.resolve()} not found (data.background_dir): give a "
                f"folder of {'/'.join(EXTENSIONS)} images, or BG-20k's with train/ and testval/ subfolders"
            )
        bg20k = (root / "train").is_dir() and (root / "testval").is_dir()
        out = {}
        for split, folder in (
            (("train", root / "train"), ("test", root / "testval")) if bg20k else (("", root),)
        ):
            files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in EXTENSIONS and p.is_file())
            if not files:
                raise DatasetNotFoundError(
                    f"composite: no background images ({', '.join(EXTENSIONS)}) in {folder.resolve()} "
                    "(data.background_dir): put images there, or use data.background=clutter"
                )
            if self.max_backgrounds is not None and len(files) > self.max_backgrounds:
                rng = np.random.default_rng([self.seed, _FOLDER, 0])
                files = [files[i] for i in np.sort(rng.choice(len(files), self.max_backgrounds, False))]
            out[split] = files
        return out if bg20k else {"train": out[""], "test": out[""]}

    def _read_images(self, files: list[Path], mode: str) -> torch.Tensor:
        """uint8 (B, C, k, k): the images as gray ('L') or RGB, resized to k×k (bilinear)."""
        out = np.empty((len(files), self.canvas, self.canvas, 3 if mode == "RGB" else 1), dtype=np.uint8)
        for i, path in enumerate(files):
            try:
                with Image.open(path) as img:
                    resized = img.convert(mode).resize((self.canvas, self.canvas), Image.BILINEAR)
            except (OSError, UnidentifiedImageError) as err:
                raise DataFormatError(
                    f"composite: background image {path} is unreadable ({err}); remove or replace it"
                ) from err
            out[i] = np.asarray(resized).reshape(out.shape[1:])
        return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()

    def _backgrounds(self, base: Layout, files, pool) -> tuple[dict[str, Layout], tuple]:
        """The train and test layouts and the background's per-channel (mean, variance)."""
        c, h, w = base.obj
        if self.background == "folder":
            if c not in (1, 3):
                raise ConfigError("data.background", "folder", "clutter for objects with C not 1 or 3")
            read: dict[tuple[Path, ...], torch.Tensor] = {}
            for names in files.values():
                if tuple(names) not in read:
                    read[tuple(names)] = self._read_images(names, "L" if c == 1 else "RGB")
            layouts = {s: replace(base, backgrounds=read[tuple(names)]) for s, names in files.items()}
            return layouts, channel_stats(layouts["train"].backgrounds)  # type: ignore[arg-type]
        f = self.fragment_size if self.fragment_size is not None else max(1, round(min(h, w) / 3))
        if f > min(h, w):
            raise ConfigError("data.fragment_size", f, f"at most the object's size {min(h, w)}")
        self.fragment_side = f
        layout = replace(base, pool=pool[0], pool_index=pool[1], f=f, fragments=self.clutter_fragments)
        rng = np.random.default_rng([self.seed, _STATS, 0])
        samples = [layout.background(_ints(rng, layout.background_highs())) for _ in range(STATS_SAMPLES)]
        return {"train": layout, "test": layout}, channel_stats(torch.stack(samples))

    def _load(self) -> dict[str, Dataset]:
        files = self._background_files() if self.background == "folder" else None
        self.source.setup()
        train, test = self.source.dataset("train"), self.source.dataset("test")
        (c, h, w), k = self.source.input_shape, self.canvas
        if k < h or k < w:
            raise ConfigError(
                "data.canvas",
                k,
                f"at least the object's size {h}x{w}",
                f"A canvas smaller than the object cannot hold it: use data.canvas>={-(-max(h, w) // 8) * 8}",
            )
        self.num_classes, self.class_names = self.source.num_classes, list(self.source.class_names)
        self.input_shape = (c, k, k)
        need_pool = self.background == "clutter" or self.source.mean is None or self.source.std is None
        pool = self._pool(train) if need_pool else None
        layouts, (bg_mean, bg_var) = self._backgrounds(
            Layout(k, (c, h, w), self.placement, self.blend), files, pool
        )
        if pool is None:
            obj_mean, obj_var = np.asarray(self.source.mean), np.asarray(self.source.std) ** 2
        else:
            obj_mean, obj_var = channel_stats(pool[0])
        rho = h * w / k**2
        self.mean = tuple(float(v) for v in rho * obj_mean + (1 - rho) * bg_mean)
        self.std = tuple(float(v) for v in np.sqrt(rho * obj_var + (1 - rho) * bg_var))
        if self._mean_arg is not None:
            self.mean, self.std = _floats(self._mean_arg, "mean", c), _floats(self._std_arg, "std", c)
        n = len(test) if self.test_size is None else min(self.test_size, len(test))  # type: ignore[arg-type]
        images, labels = torch.empty((n, c, k, k), dtype=torch.uint8), torch.empty(n, dtype=torch.int64)
        for i in range(n):
            x, labels[i] = test[i]
            images[i] = layouts["test"].compose(_to_uint8(x), np.random.default_rng([self.seed, _TEST, i]))
        self.test_sha256 = hashlib.sha256(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()
        return {"train": CompositeTrainDataset(train, layouts["train"]), "test": ArrayDataset(images, labels)}

    def save_examples(self, path: str | Path, n: int = 8, split: str = "test") -> Path:
        """Write a PNG row of the first ``n`` images of ``split`` (for a look at the data)."""
        from torchvision.utils import save_image

        dataset = self.dataset(split)
        count = min(n, len(dataset))  # type: ignore[arg-type]
        save_image(torch.stack([dataset[i][0] for i in range(count)]), str(path), nrow=count)
        return Path(path)

    def describe(self) -> dict[str, Any]:
        described = {**super().describe(), "source": self.source.describe()}
        return {
            **described,
            **{key: getattr(self, key) for key in DESCRIBED},
            "fragment_size": self.fragment_side,
        }
