"""CompositeDataModule (ARS data, its src/dataset.py): materialized test set, placement, blending, clutter,
background folders, the normalization mixture and the error messages; tiny synthetic data only."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from PIL import Image

from rs_lightning.data import DatasetNotFoundError, DigitsDataModule
from rs_lightning.data.composite import CompositeDataModule, Layout
from rs_lightning.data.quantize import first_off_grid
from rs_lightning.data.registry import DATA_MODULES
from rs_lightning.validation import ConfigError

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"
NPZ = "rs_lightning.data.npz.NpzDataModule"


def write_npz(path: Path, n_train=40, n_test=12, size=8, channels=1, seed=0, train=None, test=None) -> Path:
    """Random uint8 images (values 1..255), or constant ones (``train``/``test``: one value per image)."""
    rng = np.random.default_rng(seed)
    shape = (size, size) if channels == 1 else (size, size, channels)

    def images(n, values):
        if values is None:
            return rng.integers(1, 256, (n, *shape), dtype=np.uint8)
        return np.stack([np.full(shape, v, dtype=np.uint8) for v in values])

    x_train, x_test = images(n_train, train), images(n_test, test)
    y_train, y_test = rng.integers(0, 3, len(x_train)), rng.integers(0, 3, len(x_test))
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def write_backgrounds(folder: Path, values, mode="L", size=(20, 13)) -> Path:
    """Solid-colour images (one per value) of another size than the canvas, so they are resized."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, v in enumerate(values):
        colour = v if mode == "L" else (v, v, v)
        Image.new(mode, size, colour).save(folder / f"bg{i}.png")
    return folder


def module(npz: Path, **kwargs) -> CompositeDataModule:
    source = {"target": NPZ, "path": str(npz), **kwargs.pop("source_args", {})}
    dm = CompositeDataModule(source=source, **{"canvas": 16, "batch_size": 4, **kwargs})
    dm.setup()
    return dm


def stack(ds, order=None) -> torch.Tensor:
    return torch.stack([ds[i][0] for i in (order if order is not None else range(len(ds)))])


def find(canvas: torch.Tensor, obj: torch.Tensor) -> list[tuple[int, int]]:
    """Every (top, left) where ``obj`` appears unchanged in ``canvas``."""
    _, h, w = obj.shape
    k = canvas.shape[-1]
    return [
        (t, l)
        for t in range(k - h + 1)
        for l in range(k - w + 1)
        if torch.equal(canvas[:, t : t + h, l : l + w], obj)
    ]


@pytest.fixture
def npz(tmp_path) -> Path:
    return write_npz(tmp_path / "src.npz")


def test_test_set_is_identical_across_instances_and_access_order_and_follows_the_seed(npz):
    first = module(npz, background="clutter", fragment_size=3)
    torch.manual_seed(123)  # the global RNG state must not matter for the test set
    second = module(npz, background="clutter", fragment_size=3)
    for i in range(5):  # train accesses consume the torch RNG in between
        second.dataset("train")[i]
    n = len(first.dataset("test"))
    reversed_order = stack(second.dataset("test"), range(n - 1, -1, -1)).flip(0)
    assert torch.equal(stack(first.dataset("test")), reversed_order)
    assert torch.equal(stack(first.dataset("test")), stack(second.dataset("test")))
    other = module(npz, background="clutter", fragment_size=3, seed=1)
    assert not torch.equal(stack(first.dataset("test")), stack(other.dataset("test")))
    sha = first.describe()["test_sha256"]
    assert len(sha) == 64 and sha == second.describe()["test_sha256"] != other.describe()["test_sha256"]


def test_paste_leaves_the_object_unchanged_on_the_background(npz, tmp_path):
    folder = write_backgrounds(tmp_path / "bg", [30, 60, 90])
    dm = module(npz, background_dir=str(folder), blend="paste", test_size=8)
    objects = torch.from_numpy(np.load(npz)["x_test"][:8])[:, None]
    for i, (x, _) in enumerate(dm.dataset("test")):
        canvas = (x * 255).round().to(torch.uint8)
        spots = find(canvas, objects[i])
        assert len(spots) == 1
        (t, l) = spots[0]
        outside = torch.ones_like(canvas, dtype=torch.bool)
        outside[:, t : t + 8, l : l + 8] = False
        assert canvas[outside].unique().numel() == 1 and int(canvas[outside][0]) in (30, 60, 90)


def test_max_blend_is_the_pixelwise_max_with_the_background(npz, tmp_path):
    folder = write_backgrounds(tmp_path / "bg", [100])
    dm = module(npz, background_dir=str(folder), blend="max", placement="center", test_size=6)
    objects = torch.from_numpy(np.load(npz)["x_test"][:6])[:, None]
    assert bool((objects < 100).any()) and bool((objects > 100).any())
    for i, (x, _) in enumerate(dm.dataset("test")):
        canvas = (x * 255).round().to(torch.uint8)
        assert torch.equal(canvas[:, 4:12, 4:12], objects[i].clamp(min=100))
        canvas[:, 4:12, 4:12] = 100
        assert bool((canvas == 100).all())


@pytest.mark.parametrize("obj", [(1, 8, 8), (1, 8, 4)])
def test_edges_placement_touches_a_side_and_uniform_does_not_always(obj):
    _, h, w = obj
    k, touched, spots = 24, {}, {}
    for placement in ("edges", "uniform", "center"):
        layout = Layout(k, obj, placement, "paste", backgrounds=torch.zeros((1, 1, k, k), dtype=torch.uint8))
        found = []
        for i in range(400):
            canvas = layout.compose(torch.full(obj, 255, dtype=torch.uint8), np.random.default_rng([0, i]))
            rows, cols = canvas[0].nonzero(as_tuple=True)
            t, l = int(rows.min()), int(cols.min())
            assert (int(rows.max()) - t + 1, int(cols.max()) - l + 1) == (h, w)
            found.append((t, l))
        spots[placement] = found
        touched[placement] = [t in (0, k - h) or l in (0, k - w) for t, l in found]
    assert all(touched["edges"]) and not all(touched["uniform"])
    tops = {t for t, _ in spots["edges"]}
    lefts = {l for _, l in spots["edges"]}
    assert tops == set(range(k - h + 1)) and lefts == set(range(k - w + 1))
    sides = {(t == 0, t == k - h, l == 0, l == k - w) for t, l in spots["edges"]}
    assert {s.index(True) for s in sides} == {0, 1, 2, 3}  # all four sides occur
    assert set(spots["center"]) == {((k - h) // 2, (k - w) // 2)}


def test_edges_on_the_materialized_test_set(tmp_path):
    npz = write_npz(tmp_path / "s.npz", n_test=40)
    dm = module(npz, background_dir=str(write_backgrounds(tmp_path / "bg", [0])), canvas=24)
    objects = torch.from_numpy(np.load(npz)["x_test"])[:, None]
    for i, (x, _) in enumerate(dm.dataset("test")):
        ((t, l),) = find((x * 255).round().to(torch.uint8), objects[i])
        assert t in (0, 16) or l in (0, 16)


def test_train_items_are_fresh_per_access_and_follow_the_torch_seed(npz):
    dm = module(npz, background="clutter", fragment_size=3)
    ds = dm.dataset("train")
    torch.manual_seed(5)
    a = [ds[0][0] for _ in range(4)]
    assert all(not torch.equal(a[0], b) for b in a[1:])
    torch.manual_seed(5)
    assert all(torch.equal(x, ds[0][0]) for x in a)
    obj = torch.from_numpy(np.load(npz)["x_train"][0])[None]
    assert all(len(find((x * 255).round().to(torch.uint8), obj)) == 1 for x in a)  # pasted unchanged


def test_shapes_dtype_range_and_loaders(tmp_path):
    npz = write_npz(tmp_path / "rgb.npz", channels=3, size=8)
    dm = module(npz, background_dir=str(write_backgrounds(tmp_path / "bg", [10, 200], mode="RGB")))
    assert dm.input_shape == (3, 16, 16) and dm.num_classes == 3 and dm.class_names == ["0", "1", "2"]
    for split in ("train", "test"):
        x, y = dm.dataset(split)[0]
        assert x.dtype == torch.float32 and x.shape == (3, 16, 16) and isinstance(y, int)
        assert float(x.min()) >= 0 and float(x.max()) <= 1
    xb, yb = next(iter(dm.train_dataloader()))
    assert xb.shape == (4, 3, 16, 16) and yb.dtype == torch.int64
    assert len(dm.dataset("train")) == 40 and len(dm.dataset("test")) == 12
    same = module(npz, background_dir=str(tmp_path / "bg"), canvas=8)  # k == s: the source itself
    source = torch.from_numpy(np.load(npz)["x_test"]).permute(0, 3, 1, 2).float() / 255
    assert torch.equal(stack(same.dataset("test")), source)


def test_normalization_is_the_area_weighted_mixture(tmp_path):
    npz = write_npz(tmp_path / "c.npz", train=[200] * 10, test=[200] * 3)
    folder = write_backgrounds(tmp_path / "bg", [50, 150])
    rho = 64 / 256
    dm = module(npz, background_dir=str(folder))
    mean_bg, var_bg = 100 / 255, (50 / 255) ** 2
    assert dm.mean == pytest.approx((rho * 200 / 255 + (1 - rho) * mean_bg,), abs=1e-12)
    assert dm.std == pytest.approx((math.sqrt((1 - rho) * var_bg),), abs=1e-12)
    given = module(npz, background_dir=str(folder), source_args={"mean": [0.3], "std": [0.2]})
    assert given.mean == pytest.approx((rho * 0.3 + (1 - rho) * mean_bg,))
    assert given.std == pytest.approx((math.sqrt(rho * 0.04 + (1 - rho) * var_bg),))
    black = module(npz, background="clutter", clutter_fragments=0)  # black canvases
    assert black.mean == pytest.approx((rho * 200 / 255,)) and black.std == pytest.approx((0.0,), abs=1e-9)
    assert module(npz, background_dir=str(folder), mean=[0.5], std=[0.25]).std == (0.25,)
    identity = module(npz, background_dir=str(folder), normalize=False)
    assert identity.mean is None and identity.std is None


def test_bg20k_train_and_testval_folders_are_kept_apart(npz, tmp_path):
    root = tmp_path / "BG-20k"
    write_backgrounds(root / "train", [10, 20])
    write_backgrounds(root / "testval", [200])
    dm = module(npz, background_dir=str(root), placement="center")

    def outside(x):
        canvas = (x * 255).round().to(torch.uint8)
        canvas[:, 4:12, 4:12] = 0
        return set(canvas.unique().tolist()) - {0}

    assert all(outside(x) == {200} for x, _ in dm.dataset("test"))
    train = [outside(dm.dataset("train")[i % 40][0]) for i in range(40)]
    assert set().union(*train) == {10, 20} and all(len(s) == 1 for s in train)
    flat = module(npz, background_dir=str(root / "train"), placement="center")
    assert set().union(*(outside(x) for x, _ in flat.dataset("test"))) == {10, 20}


def test_clutter_fragments_come_from_other_training_images(tmp_path):
    npz = write_npz(tmp_path / "c.npz", n_train=2, train=[100, 200], test=[50] * 4)
    dm = module(npz, background="clutter", fragment_size=4, clutter_fragments=20, blend="paste", canvas=24)
    values = set()
    for _ in range(10):
        canvas = (dm.dataset("train")[0][0] * 255).round().to(torch.uint8)
        values |= set(canvas.unique().tolist())
    assert values == {0, 100, 200}  # the object (100) pasted over fragments of the other image (200)
    for _ in range(10):
        canvas = (dm.dataset("train")[0][0] * 255).round().to(torch.uint8)
        spots = find(canvas, torch.full((1, 8, 8), 100, dtype=torch.uint8))
        outside = canvas.clone()
        outside[:, spots[0][0] : spots[0][0] + 8, spots[0][1] : spots[0][1] + 8] = 0
        assert set(outside.unique().tolist()) <= {0, 200}
    test_values = set(stack(dm.dataset("test")).mul(255).round().unique().tolist())
    assert 50 in test_values and test_values <= {0, 50, 100, 200}  # test canvases: train fragments only


def test_a_source_without_uint8_arrays_digits():
    dm = CompositeDataModule(
        source={"target": "rs_lightning.data.digits.DigitsDataModule", "test_size": 20},
        canvas=16,
        background="clutter",
        test_size=5,
    )
    dm.setup()
    assert dm.input_shape == (1, 16, 16) and dm.num_classes == 10 and len(dm.dataset("test")) == 5
    assert isinstance(dm.source, DigitsDataModule) and dm.describe()["fragment_size"] == 3


def test_errors_name_the_key_value_and_fix(npz, tmp_path):
    source = {"target": NPZ, "path": str(npz)}
    with pytest.raises(ConfigError, match=r"data\.canvas=60.*multiple of 8.*UNet.*56.*64"):
        CompositeDataModule(source, canvas=60, background="clutter")
    with pytest.raises(ConfigError, match=r"data\.canvas=8 .*16x16.*smaller than the object"):
        module(write_npz(tmp_path / "big.npz", size=16), canvas=8, background="clutter")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images")
    with pytest.raises(DatasetNotFoundError, match=r"no background images.*\.png.*empty") as err:
        module(npz, background_dir=str(empty))
    assert "\n" not in str(err.value)
    with pytest.raises(DatasetNotFoundError, match=r"nowhere.*not found.*\.jpg"):
        module(npz, background_dir=str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match=r"data\.std=None.*data\.mean"):
        CompositeDataModule(source, background="clutter", mean=[0.5])
    with pytest.raises(ConfigError, match=r"data\.background_dir=None"):
        CompositeDataModule(source)
    with pytest.raises(ConfigError, match=r"data\.placement='corner'.*edges or uniform or center"):
        CompositeDataModule(source, background="clutter", placement="corner")
    with pytest.raises(ConfigError, match=r"data\.source\.target='os\.system'.*rs_lightning\.data\."):
        CompositeDataModule({"target": "os.system"}, background="clutter")
    with pytest.raises(ConfigError, match=r"data\.source=.*NpzDataModule.*colour"):
        CompositeDataModule({**source, "colour": 1}, background="clutter")
    with pytest.raises(ConfigError, match=r"data\.fragment_size=9.*at most the object's size 8"):
        module(npz, background="clutter", fragment_size=9)


def test_describe_and_examples(npz, tmp_path):
    dm = module(npz, background="clutter", fragment_size=3)
    desc = dm.describe()
    json.dumps(desc)
    assert desc["name"] == "composite" and desc["source"]["name"] == "npz" and desc["canvas"] == 16
    assert [desc[k] for k in ("background", "blend", "placement", "seed")] == ["clutter", "paste", "edges", 0]
    assert desc["splits"] == {"train": 40, "test": 12} and desc["input_shape"] == [1, 16, 16]
    # uint8 objects on uint8 canvases: on the 8-bit grid, as the module says (lattice noise by default)
    assert dm.eight_bit and first_off_grid(dm.dataset("test"), range(4)) is None
    png = dm.save_examples(tmp_path / "examples.png", n=4)
    assert Image.open(png).size[0] > 4 * 16


def test_the_configs_build_through_hydra_and_the_checkpoint_loader(npz, tmp_path):
    cfg = OmegaConf.load(CONF / "cluttered_mnist.yaml")
    cfg.source.path, cfg.test_size = str(npz), 4
    cfg.fragment_size = 3
    plain = OmegaConf.to_container(cfg, resolve=True)
    rebuilt = DATA_MODULES.build(plain, "data")  # what certify.py does with the checkpoint's
    dm = instantiate(cfg)
    rebuilt.setup()
    dm.setup()
    assert torch.equal(stack(rebuilt.dataset("test")), stack(dm.dataset("test")))
    assert (dm.canvas, dm.blend, dm.background, dm.batch_size) == (56, "max", "clutter", 256)
    cfg = OmegaConf.load(CONF / "composite.yaml")
    cfg.source = {"target": NPZ, "path": str(write_npz(tmp_path / "rgb.npz", channels=3))}
    cfg.background_dir = str(write_backgrounds(tmp_path / "bg", [1, 2], mode="RGB"))
    dm = DATA_MODULES.build(OmegaConf.to_container(cfg, resolve=True), "data")
    dm.setup()
    assert dm.input_shape == (3, 64, 64) and (dm.blend, dm.placement) == ("paste", "edges")
