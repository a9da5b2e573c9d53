"""certify.py norm=l2|linf for every model, and the report's norm handling."""

import csv
import json
import math

import numpy as np
import pytest
from omegaconf import open_dict
from rs_testing import compose_config

from rs_lightning.analysis.run_view import load_run
from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main
from rs_lightning.cli.report.compare import report
from rs_lightning.smoothing import Certificate

BASE = ["checkpoint=null", "model=constant", "data=digits", "sigma=0.25", "n0=10", "n=1000", "max=40"]


def run(out, *overrides):
    cfg = compose_config("certify", [*BASE, f"output_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.device = "cpu"
    return certify(cfg)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("norms")
    run(root / "l2")
    run(root / "linf", "norm=linf")
    return root


def rows(folder):
    with (folder / "certify.tsv").open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_linf_radius_is_the_l2_radius_over_sqrt_d_and_the_settings_say_so(runs):
    """The same counts (one noise stream) and r_inf = r_2 / sqrt(d), d = 1*8*8 = 64 for the digits; the
    settings record norm and d, and the summary's grid steps by 1/255 up to the L-infinity ceiling."""
    l2, linf = rows(runs / "l2"), rows(runs / "linf")
    assert [r["nA"] for r in l2] == [r["nA"] for r in linf]
    for a, b in zip(l2, linf, strict=True):
        assert float(b["radius"]) == pytest.approx(float(a["radius"]) / 8, abs=1e-6)
    settings = json.loads((runs / "linf" / "settings.json").read_text())
    assert settings["norm"] == "linf" and settings["dim"] == 64
    assert json.loads((runs / "l2" / "settings.json").read_text())["norm"] == "l2"
    grid = [float(r) for r in json.loads((runs / "linf" / "summary.json").read_text())["certified_accuracy"]]
    assert grid[1] == pytest.approx(1 / 255, abs=1e-6)
    assert grid[-1] <= Certificate("gaussian", "linf").max_radius(0.25, 1000, 0.001, 64) < grid[-1] + 1 / 255


def test_a_folder_of_one_norm_is_not_resumed_with_another(runs, capsys):
    with pytest.raises(ValueError, match="norm"):
        run(runs / "l2", "norm=linf")
    with pytest.raises(ValueError, match="norm"):
        run(runs / "x", "noise=laplace", "norm=l2")


def test_the_report_refuses_mixed_norms_and_converts_on_request(runs, tmp_path, capsys):
    """Radii of different balls are not comparable: the protocol check names norm; --norm linf states
    every run in L-infinity (the L2 run divided by sqrt(d) equals the run certified in L-infinity)."""
    assert main([str(runs / "l2"), str(runs / "linf"), "--out", str(tmp_path / "mixed")]) == 2
    assert "norm" in capsys.readouterr().err
    out = report([str(runs / "l2"), str(runs / "linf")], str(tmp_path / "linf"), norm="linf")
    acrs = [row["acr"] for row in out["table"]]
    assert acrs[0] == pytest.approx(acrs[1], abs=1e-9)
    assert "norm" in (tmp_path / "linf" / "report.md").read_text()
    assert out["runs"][0].radius_scale == pytest.approx(0.25 / math.sqrt(64))


def test_linf_needs_a_recorded_dimension(runs, tmp_path, capsys):
    """A run without a recorded d (an older run, a Cohen TSV) cannot be stated in L-infinity: one line,
    exit 2, unless --dim gives it."""
    old = tmp_path / "old"
    old.mkdir()
    for name in ("certify.tsv", "summary.json"):
        (old / name).write_text((runs / "l2" / name).read_text())
    settings = json.loads((runs / "l2" / "settings.json").read_text())
    del settings["dim"]
    (old / "settings.json").write_text(json.dumps(settings))
    assert main([str(old), "--norm", "linf", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--dim" in err and len(err.strip().splitlines()) == 1
    assert main([str(old), "--norm", "linf", "--dim", "64", "--out", str(tmp_path / "r2")]) == 0
    converted = load_run(old).in_norm("linf", 64)
    assert np.allclose(converted.rows["radius"], load_run(runs / "linf").rows["radius"], atol=1e-6)


def test_rgb_inputs_divide_by_sqrt_of_c_h_w(tmp_path):
    """d counts every channel: 3x8x8 RGB images give d = 192, so r_inf = r_2 / sqrt(192) (a d of H*W
    would overstate r_inf by sqrt(3))."""
    rng = np.random.default_rng(0)
    path = tmp_path / "rgb.npz"
    images = rng.integers(0, 256, (14, 8, 8, 3), dtype=np.uint8)
    np.savez(path, x_train=images[:8], y_train=np.arange(8) % 2, x_test=images[8:], y_test=np.zeros(6, int))
    common = [
        "checkpoint=null",
        "model=constant",
        "data=npz",
        f"data.path={path}",
        "sigma=0.25",
        "n0=10",
        "n=500",
    ]
    for name, extra in (("l2", []), ("linf", ["norm=linf"])):
        cfg = compose_config("certify", [*common, f"output_dir={tmp_path / name}", *extra])
        with open_dict(cfg):
            cfg.device = "cpu"
        certify(cfg)
    assert json.loads((tmp_path / "linf" / "settings.json").read_text())["dim"] == 192
    for a, b in zip(rows(tmp_path / "l2"), rows(tmp_path / "linf"), strict=True):
        assert float(b["radius"]) == pytest.approx(float(a["radius"]) / math.sqrt(192), abs=1e-6)
