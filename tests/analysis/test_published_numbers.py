"""rs_lightning.analysis.published_numbers: the table's internal consistency,
the comparison arithmetic, and ``python -m rs_lightning.cli.report published`` on certify folders."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from rs_testing import REPO, compose_config
from run_folders import write_run_folder
from scipy.stats import norm

from rs_lightning.analysis import published_numbers as pn
from rs_lightning.cli import published_cells
from rs_lightning.cli.report import main
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.stats import clopper_pearson_lower

ALL_METHODS = "cohen, smoothadv, macer, consistency, smoothmix, catrs, acr_gaming$"


def cap(sigma: float, n: int = 100_000, alpha: float = 0.001) -> float:
    """Largest certifiable radius σ·Φ⁻¹(α^(1/N)): Cohen et al.'s CERTIFY with n_A = N."""
    return sigma * norm.ppf(alpha ** (1 / n))


# ------------------------------------------------------------------------------------------ the table
@pytest.mark.parametrize(
    ("key", "acr", "radius", "accuracy"),
    [
        (("cifar10", "catrs", 0.5), 0.757, 0.0, 62.3),
        (("cifar10", "catrs", 0.5), 0.757, 1.75, 20.6),
        (("cifar10", "cohen", 0.25), 0.487, 0.75, 32.7),
        (("cifar10", "acr_gaming", 1.0), 0.844, 3.5, 6.7),
        (("cifar10", "macer", 1.0), 0.760, 1.0, 28.9),
        (("mnist", "cohen", 0.25), 0.911, 0.5, 96.7),
        (("mnist", "macer", 1.0), 1.595, 2.5, 20.1),
        (("mnist", "consistency", 0.5), 1.655, 1.75, 60.4),
    ],
)
def test_spot_values_are_the_reference_values(key, acr, radius, accuracy):
    cell = pn.PUBLISHED[key]
    assert cell.acr == acr
    assert dict(zip(cell.radii, cell.accuracy_percent, strict=True))[radius] == accuracy


def test_cells_cover_table_2_the_mnist_table_and_catrs_mnist():
    cifar = {(m, s) for d, m, s in pn.PUBLISHED if d == "cifar10"}
    assert cifar == {(m, s) for m in pn.METHODS for s in pn.SIGMAS}  # Sun et al. Table 2: 7 methods x 3 sigma
    mnist = {(m, s) for d, m, s in pn.PUBLISHED if d == "mnist"}
    assert mnist == {
        (m, s) for m in ("cohen", "smoothadv", "macer", "consistency", "catrs") for s in pn.SIGMAS
    }
    catrs = [pn.PUBLISHED["mnist", "catrs", s] for s in pn.SIGMAS]
    assert [c.acr for c in catrs] == [0.933, 1.700, 1.831] and all(not c.radii for c in catrs)
    for cell in pn.PUBLISHED.values():
        assert cell.protocol == pn.Protocol(
            n0=100, n=100_000, alpha=0.001, start=0, skip=1, num_images=10_000
        )
        assert (REPO / "conf" / "experiment" / f"{cell.experiment}.yaml").is_file()


@pytest.mark.parametrize("key", sorted(pn.PUBLISHED))
def test_cell_is_consistent(key):
    """Accuracies non-increasing in r; 0 beyond the N = 1e5 cap; the ACR between the lower and upper Riemann
    sums of ∫ CA(r) dr on the published grid (ACR = ∫ certified accuracy dr), up to the 0.1-point rounding."""
    cell = pn.PUBLISHED[key]
    if not cell.radii:
        return
    radii, acc = np.array(cell.radii), np.array(cell.accuracy)
    assert radii[0] == 0 and (np.diff(radii) > 0).all()
    assert (np.diff(acc) <= 0).all() and (acc >= 0).all() and (acc <= 1).all()
    top = cap(cell.sigma)
    assert (acc[radii > top] == 0).all() and (radii[acc > 0] <= top).all()
    widths = np.diff(np.append(radii, top))
    lower, upper = float(np.sum(np.append(acc[1:], 0.0) * widths)), float(np.sum(acc * widths))
    assert lower - 0.002 <= cell.acr <= upper + 0.002


@pytest.mark.parametrize(
    ("text", "sigma"), [("0.25", 0.25), (".5", 0.5), ("0.50", 0.5), ("1", 1.0), ("1.0", 1.0)]
)
def test_sigma_spellings(text, sigma):
    assert pn.parse_sigma(text) == sigma
    assert pn.cell("cifar10", "cohen", text).experiment == f"cohen_cifar10_sigma{pn.sigma_tag(sigma)}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("imagenet", "cohen", "0.5"), r"^dataset='imagenet' is invalid: choose one of cifar10, mnist$"),
        (("cifar10", "gaussian", "0.5"), "^method='gaussian' is invalid: choose one of " + ALL_METHODS),
        (("cifar10", "cohen", "0.12"), r"^sigma='0.12' is invalid: choose one of 0.25, 0.5, 1.0$"),
        (
            ("mnist", "smoothmix", "0.5"),
            r"^method='smoothmix' has no published number for dataset=mnist "
            r"sigma=0.5: choose one of cohen, smoothadv, macer, consistency, catrs$",
        ),
    ],
)
def test_unknown_cells_name_the_value_and_the_choices(args, message):
    with pytest.raises(pn.UnknownCellError, match=message):
        pn.cell(*args)


def test_shell_lines_for_the_script(capsys):
    assert published_cells.main(["shell", "cifar10", "0.50", "catrs"]) == 0
    out = capsys.readouterr().out.strip()
    assert "CELL_EXPERIMENT=catrs_cifar10_sigma050 " in out and "CELL_SIGMA=0.5 " in out
    assert "CELL_N0=100 CELL_N=100000 CELL_ALPHA=0.001 CELL_START=0 CELL_SKIP=1 CELL_NUM_IMAGES=10000" in out
    assert published_cells.main(["shell", "mnist", "0.5", "acr_gaming"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: method='acr_gaming' has no published number") and err.count("\n") == 1


# -------------------------------------------------------------------------------------- the comparison
def test_comparison_rows_give_differences_and_binomial_standard_errors():
    cell = pn.PUBLISHED["mnist", "cohen", 0.25]  # r = 0, .25, .5, .75, 1.0: 99.2 98.5 96.7 93.1 0
    radius = np.array([0.9, 0.6, 0.3, 0.1, 0.0])
    correct = np.array([1, 1, 1, 1, 0])
    rows = pn.comparison_rows(cell, radius, correct)
    assert [r["radius"] for r in rows] == [None, 0.0, 0.25, 0.5, 0.75, 1.0]
    acr = rows[0]
    assert acr["ours"] == pytest.approx(1.9 / 5) and acr["difference"] == pytest.approx(1.9 / 5 - 0.911)
    assert acr["se"] == pytest.approx(np.std([0.9, 0.6, 0.3, 0.1, 0.0], ddof=1) / math.sqrt(5))
    ours = [0.8, 0.6, 0.4, 0.2, 0.0]
    for row, mine, pub in zip(rows[1:], ours, cell.accuracy, strict=True):
        assert row["ours"] == pytest.approx(mine) and row["published"] == pub
        assert row["se"] == pytest.approx(math.sqrt(mine * (1 - mine) / 5))
        assert row["difference"] == pytest.approx(mine - pub)
    assert rows[-1]["z"] == 0.0  # 0 against 0 with SE 0


def test_protocol_differences_name_each_key():
    cell = pn.PUBLISHED["cifar10", "catrs", 0.5]
    same = {
        "dataset": "cifar10",
        "sigma": 0.5,
        "n0": 100,
        "n": 100_000,
        "alpha": 0.001,
        "split": "test",
        "mode": "certify",
        "sampling": "cohen",
        "precision": "32",
    }
    same["idx"] = list(range(10_000))
    assert pn.protocol_differences(cell, same) == {}
    other = same | {"n": 10_000, "sigma": 0.25, "precision": "bf16", "split": "train"}
    other["idx"] = list(range(0, 10_000, 20))
    assert pn.protocol_differences(cell, other) == {
        "sigma": ("0.25", "0.5"),
        "n": ("10000", "100000"),
        "inputs": ("500 images (idx 0…9980, skip 20)", "10000 images (idx 0…9999, contiguous)"),
        "split": ("train", "test"),
        "precision": ("bf16", "32"),
    }
    assert pn.protocol_differences(cell, same | {"alpha": None})["alpha"] == ("not recorded", "0.001")


# ------------------------------------------------------------------------------- report published (CLI)
def synthetic_run(
    folder: Path, cell: pn.PublishedCell, accuracy, *, n=100_000, images=10_000, data="cifar10"
):
    """A certify.py-like folder (tests/run_folders.py: the project's writer, a spec's settings) whose
    certified accuracy at the cell's radii is ``accuracy`` (fractions, multiples of 1/images); correct inputs
    sit 0.01 above one, the others abstain (nA = 0)."""
    counts = np.round(np.asarray(accuracy) * images).astype(int)
    radii = [
        r + 0.01 for k, r in enumerate(cell.radii) for _ in range(counts[k] - np.append(counts, 0)[k + 1])
    ]
    # each correct input's nA: the fewest of n whose Clopper-Pearson bound certifies its radius, so every row
    # is what CERTIFY writes (the report checks pA_lower and radius against alpha and sigma)
    bounds = clopper_pearson_lower(np.arange(n + 1), n, 0.001)
    n_a = np.minimum(np.searchsorted(bounds, norm.cdf(np.asarray(radii) / cell.sigma)), n)
    written = Certificate().radius(bounds[n_a], cell.sigma)
    record = {
        "subset": {"skip": 1, "start": 0, "max": None, "num_inputs": images},
        "data": {"name": data, "num_classes": 10, "input_shape": list(pn.INPUT_SHAPES["cifar10"])},
        "checkpoint": None,
        "model": None,
    }
    all_n_a = np.append(n_a, np.zeros(images - n_a.size, dtype=int))
    write_run_folder(
        folder, all_n_a, n=n, sigma=cell.sigma, alpha=0.001, labels=np.ones(images, dtype=int), record=record
    )
    return folder, float(np.sum(written)) / images


SHIFT = (0.010, -0.020, 0.0, 0.005, -0.005, 0.015, -0.015, 0.003)  # ours − published per radius


@pytest.fixture(scope="module")
def catrs_run(tmp_path_factory):
    cell = pn.PUBLISHED["cifar10", "catrs", 0.5]
    accuracy = np.array(cell.accuracy) + np.array(SHIFT)
    return synthetic_run(tmp_path_factory.mktemp("catrs_s0.5"), cell, accuracy), cell


def test_report_published_writes_the_differences(catrs_run, tmp_path, capsys):
    (run, acr), cell = catrs_run
    args = [str(run), "--dataset", "cifar10", "--method", "catrs", "--sigma", "0.50", "--out", str(tmp_path)]
    assert main(["published", *args]) == 0
    printed = capsys.readouterr().out
    text = (tmp_path / "published.md").read_text()
    assert printed.startswith(text)
    assert "- Protocol: the same as the published one" in text and "PROTOCOL DIFFERENCE" not in text
    assert "row “CAT-RS” of Sun et al. 2025 Table 2 (released logs: eth-sri/acr-weakness" in text
    assert "| certified accuracy | 0.25 | 56.8 | 54.80 | 0.50 | -2.00 | -4.0 |" in text
    assert "| certified accuracy | 0.5 | 50.5 | 50.50 | 0.50 | +0.00 | +0.0 |" in text
    with (tmp_path / "published.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["metric"] for r in rows] == ["ACR"] + ["certified accuracy"] * 8
    assert float(rows[0]["ours"]) == pytest.approx(acr) and float(rows[0]["published"]) == 0.757
    assert float(rows[0]["difference"]) == pytest.approx(acr - 0.757)
    for row, r, shift, pub in zip(rows[1:], cell.radii, SHIFT, cell.accuracy, strict=True):
        ours = pub + shift
        assert float(row["radius"]) == r and float(row["difference"]) == pytest.approx(shift, abs=1e-12)
        assert float(row["se"]) == pytest.approx(math.sqrt(ours * (1 - ours) / 10_000))
    pairs = zip(SHIFT, cell.accuracy, strict=True)
    far = sum(abs(s) / math.sqrt((p + s) * (1 - p - s) / 1e4) > 2 for s, p in pairs)
    assert f"{far + (abs(acr - 0.757) > 2 * float(rows[0]['se']))} of 9 values differ" in text


def test_report_published_refuses_another_protocol_unless_allowed(catrs_run, tmp_path, capsys):
    (run, _), _ = catrs_run
    args = [
        str(run),
        "--dataset",
        "cifar10",
        "--method",
        "catrs",
        "--sigma",
        "1.0",
        "--out",
        str(tmp_path / "a"),
    ]
    assert main(["published", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert "sigma: ours 0.5, published 1" in err and "--allow-protocol-difference" in err
    assert not (tmp_path / "a").exists()
    assert main(["published", *args, "--allow-protocol-difference"]) == 0
    text = (tmp_path / "a" / "published.md").read_text()
    assert "PROTOCOL DIFFERENCE (--allow-protocol-difference)" in text
    assert "- **sigma differs**: ours 0.5, published 1" in text


def test_report_published_refuses_a_smaller_budget_and_an_incomplete_run(tmp_path, capsys):
    cell = pn.PUBLISHED["cifar10", "cohen", 1.0]
    run, _ = synthetic_run(tmp_path / "small", cell, cell.accuracy, n=10_000, images=9_990)
    assert main(["published", str(run), "--dataset", "cifar10", "--method", "cohen", "--sigma", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "n: ours 10000, published 100000" in err
    assert "inputs: ours 9990 images (idx 0…9989, contiguous), published 10000 images" in err
    assert main(["published", str(run), "--dataset", "mnist", "--method", "cohen", "--sigma", "1"]) == 2
    assert "dataset: ours cifar10, published mnist" in capsys.readouterr().err


def test_report_published_refuses_a_real_digits_run(tmp_path, capsys):
    """certify.py's own folder (the constant classifier on the embedded digits): another dataset, budget and
    test set than CIFAR-10's, each named; allowed, the comparison states them."""
    from omegaconf import open_dict

    from rs_lightning.cli.certify import certify

    out = tmp_path / "run"
    overrides = [
        "checkpoint=null",
        "model=constant",
        "data=digits",
        "sigma=0.25",
        "n0=10",
        "n=1000",
        "max=20",
    ]
    cfg = compose_config("certify", [*overrides, f"output_dir={out}"])
    with open_dict(cfg):
        cfg.device = "cpu"
    certify(cfg)
    capsys.readouterr()
    args = ["published", str(out), "--dataset", "cifar10", "--method", "cohen", "--sigma", "0.25"]
    assert main([*args, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    for part in (
        "dataset: ours digits, published cifar10",
        "n0: ours 10, published 100",
        "n: ours 1000",
        "inputs: ours 20 images (idx 0…19, contiguous)",
    ):
        assert part in err
    assert main([*args, "--out", str(tmp_path / "r"), "--allow-protocol-difference"]) == 0
    text = (tmp_path / "r" / "published.md").read_text()
    assert "- **dataset differs**: ours digits, published cifar10" in text
    assert "method in the checkpoint: ConstantClassifier" in text
    settings = json.loads((out / "settings.json").read_text())
    assert settings["n"] == 1000


def test_report_published_rejects_an_unknown_cell_in_one_line(catrs_run, capsys):
    (run, _), _ = catrs_run
    assert main(["published", str(run), "--dataset", "mnist", "--method", "smoothmix", "--sigma", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: method='smoothmix' has no published number") and err.count("\n") == 1
