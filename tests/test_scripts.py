"""The comparison tools of scripts/ that the evidence generators call (and a user runs on their own run
folders): precision agreement and the ISS comparison table."""

import json
import runpy
from pathlib import Path

import pytest
from rs_testing import REPO
from run_folders import write_run_folder


def write_run(folder: Path, radii, correct) -> Path:
    """Rows with the given radii, each correct or wrong (another class than its label 0), 90 of 100 draws."""
    wrong = [j for j, c in enumerate(correct) if not c]
    return write_run_folder(
        folder,
        [90] * len(radii),
        n=100,
        n0=10,
        labels=[0] * len(radii),
        wrong=wrong,
        columns={"radius": radii, "time": [0.0] * len(radii)},
        settings={},
    )


AGREEMENT = REPO / "scripts" / "precision_agreement.py"


def agreement(*args: str) -> dict:
    return runpy.run_path(str(AGREEMENT))["main"](list(args))


def test_precision_agreement_compares_runs_row_by_row(tmp_path):
    a = write_run(tmp_path / "a", [0.5, 0.6, 0.7], [1, 1, 1])
    b = write_run(tmp_path / "b", [0.5, 0.65, 0.7], [1, 1, 0])
    out = agreement("runs", str(a), str(b))
    assert out["inputs"] == 3 and out["radius_changed"] == 1 and out["correct_changed"] == 1
    assert out["class_or_abstention_changed"] == 1 and out["max_radius_change"] == pytest.approx(0.05)


def test_precision_agreement_on_noisy_samples(trained_digits, capsys, tmp_path):
    out = agreement(
        "samples",
        str(trained_digits["checkpoint"]),
        "--inputs",
        "6",
        "--samples",
        "300",
        "--settings",
        "bf16",
        "fp32+cl",
    )
    assert out["inputs"] == 6 and out["samples_per_input"] == 300
    for name in ("bf16", "fp32+cl"):
        setting = out["settings"][name]
        assert (
            0 <= setting["share"] <= 0.05 and setting["share"] == setting["samples_with_another_class"] / 1800
        )
        assert setting["inputs_with_any_difference"] <= 6
        counts = out["per_input"][name]  # the per-input rows the docs' sums come from
        assert len(counts) == 6 and all(0 <= c <= 300 for c in counts)
        assert sum(counts) == setting["samples_with_another_class"]
    assert len(set(out["idx"])) == 6
    assert '"bf16"' in capsys.readouterr().out
    written = tmp_path / "samples.json"  # --out: the file holds the JSON alone (no command echo mixed in)
    checkpoint = str(trained_digits["checkpoint"])
    agreement("samples", checkpoint, "--inputs", "2", "--samples", "100", "--out", str(written))
    assert json.loads(written.read_text())["inputs"] == 2 and capsys.readouterr().out == ""


ISS_SCRIPT = REPO / "scripts" / "iss_comparison.py"


def write_rows(folder: Path, radii, samples, seconds, settings: dict) -> Path:
    """Rows of label 0 certified at the given radii (abstaining at radius 0), with the given draws and
    seconds per input, and settings.json {"n": 1000, "precision": "bf16", **settings}."""
    n_a = [900 if r > 0 else 0 for r in radii]  # abstains exactly where the radius is 0
    return write_run_folder(
        folder,
        n_a,
        n=1000,
        n0=10,
        labels=[0] * len(radii),
        columns={"radius": radii, "samples": samples, "time": seconds},
        settings={"n": 1000, "precision": "bf16", **settings},
    )


def test_iss_comparison_reports_draws_time_and_decline(tmp_path, capsys):
    ias = write_rows(tmp_path / "ias", [1.0, 0.5, 0.0, 0.8], [1010] * 4, [2.0] * 4, {"sampling": "cohen"})
    iss = {"sampling": "iss", "iss": {"decline": "ad", "max_decline": 0.05}}
    fast = write_rows(tmp_path / "iss", [0.9, 0.48, 0.0, 0.8], [510, 110, 10, 410], [1.0, 0.2, 0.1, 0.7], iss)
    rows = runpy.run_path(str(ISS_SCRIPT))["main"]([str(ias), str(fast), "--radii", "0", "0.5"])
    assert rows[0]["sampling"] == "IAS" and rows[0]["samples_ratio"] == 1.0
    assert rows[1]["sampling"] == "ISS AD 0.05" and rows[1]["mean_samples"] == pytest.approx(260)
    assert rows[1]["samples_ratio"] == pytest.approx(1010 / 260) and rows[1]["time_ratio"] == pytest.approx(
        2 / 0.5
    )
    assert rows[1]["max_decline"] == pytest.approx(0.1) and rows[1]["share_above_max_decline"] == 0.25
    assert rows[1]["certified_accuracy"] == {"0": 0.75, "0.5": 0.5} and rows[1]["acr"] == pytest.approx(
        2.18 / 4
    )
    assert "| ISS AD 0.05 | bf16 | 260 | 3.88 |" in capsys.readouterr().out
