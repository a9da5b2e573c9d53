"""scripts/acr_difference_ci.py: the paired ACR difference used in docs/results.md."""

import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest

from rs_lightning.analysis.results import ResultWriter

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "acr_difference_ci.py"


def write_run(folder: Path, radii, correct, idx=None) -> Path:
    idx = range(len(radii)) if idx is None else idx
    with ResultWriter(folder / "certify.tsv") as writer:
        for i, r, c in zip(idx, radii, correct, strict=True):
            writer.write(
                dict(idx=i, label=0, predict=0 if c else 1, radius=r, correct=c, time=0.0,
                     nA=90, n=100, pA_lower=0.8, pA_hat=0.9, n0=10, nA0=9, samples=110)
            )  # fmt: skip
    return folder


def run_script(capsys, *args: str) -> str:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "argv", [str(SCRIPT), *args])
        runpy.run_path(str(SCRIPT), run_name="__main__")
    return capsys.readouterr().out


def test_paired_difference_counts_wrong_inputs_as_zero_and_brackets_the_mean(tmp_path, capsys):
    rng = np.random.default_rng(1)
    radii = rng.uniform(0, 1, 200)
    a = write_run(tmp_path / "a", radii, [1] * 200)
    # b: the same radii, but the first 50 inputs wrong (radius counts 0), paired by idx in another order
    order = rng.permutation(200)
    b = write_run(tmp_path / "b", radii[order], [int(i >= 50) for i in order], idx=order.tolist())
    out = run_script(capsys, str(a), str(b / "certify.tsv"), "--resamples", "2000")
    expected = radii[:50].sum() / 200
    mean, low, high = (float(v.strip("[],")) for v in np.array(out.split())[[3, 6, 7]])
    assert mean == pytest.approx(expected, abs=5e-5)
    assert low < expected < high and high - low < 0.1


def test_identical_runs_have_a_zero_width_interval(tmp_path, capsys):
    a = write_run(tmp_path / "a", [0.5, 0.2, 0.0], [1, 1, 0])
    out = run_script(capsys, str(a), str(a))
    assert "+0.0000  95% CI [+0.0000, +0.0000]  (3 inputs)" in out


def test_certified_accuracy_difference_at_a_radius(tmp_path, capsys):
    """--radius R: the per-input term is 1[certified correct with radius >= R]; a has 3 of 4 at r >= 0.4,
    b has 1 (its second input is wrong): difference +0.5 at 0.4, and +0.25 at 0 (b's one wrong input)."""
    a = write_run(tmp_path / "a", [0.5, 0.45, 0.4, 0.1], [1, 1, 1, 1])
    b = write_run(tmp_path / "b", [0.5, 0.45, 0.2, 0.1], [1, 0, 1, 1])
    out = run_script(capsys, str(a), str(b), "--radius", "0", "0.4", "--resamples", "500").splitlines()
    assert out[0].startswith("certified accuracy at r=0: ") and "+0.2500" in out[0]
    assert out[1].startswith("certified accuracy at r=0.4: ") and "+0.5000" in out[1]


def test_runs_without_shared_inputs_are_refused(tmp_path, capsys):
    a = write_run(tmp_path / "a", [0.5], [1])
    b = write_run(tmp_path / "b", [0.5], [1], idx=[7])
    with pytest.raises(SystemExit, match="shares no input idx"):
        run_script(capsys, str(a), str(b))


AGREEMENT = Path(__file__).resolve().parents[1] / "scripts" / "precision_agreement.py"


def agreement(*args: str) -> dict:
    return runpy.run_path(str(AGREEMENT))["main"](list(args))


def test_precision_agreement_compares_runs_row_by_row(tmp_path):
    a = write_run(tmp_path / "a", [0.5, 0.6, 0.7], [1, 1, 1])
    b = write_run(tmp_path / "b", [0.5, 0.65, 0.7], [1, 1, 0])
    out = agreement("runs", str(a), str(b))
    assert out["inputs"] == 3 and out["radius_changed"] == 1 and out["correct_changed"] == 1
    assert out["class_or_abstention_changed"] == 1 and out["max_radius_change"] == pytest.approx(0.05)


def test_precision_agreement_on_noisy_samples(trained_digits, capsys):
    out = agreement("samples", str(trained_digits["checkpoint"]), "--inputs", "6", "--samples", "300",
                    "--settings", "bf16", "fp32+cl")  # fmt: skip
    assert out["inputs"] == 6 and out["samples_per_input"] == 300
    for name in ("bf16", "fp32+cl"):
        setting = out["settings"][name]
        assert (
            0 <= setting["share"] <= 0.05 and setting["share"] == setting["samples_with_another_class"] / 1800
        )
        assert setting["inputs_with_any_difference"] <= 6
    assert '"bf16"' in capsys.readouterr().out


ISS_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "iss_comparison.py"


def write_rows(folder: Path, radii, samples, seconds, settings: dict) -> Path:
    with ResultWriter(folder / "certify.tsv") as writer:
        for i, (r, s, t) in enumerate(zip(radii, samples, seconds, strict=True)):
            row = dict(idx=i, label=0, predict=0 if r > 0 else -1, radius=r, correct=int(r > 0), time=t)
            writer.write(row | dict(nA=90, n=s - 10, pA_lower=0.8, pA_hat=0.9, n0=10, nA0=9, samples=s))
    (folder / "settings.json").write_text(json.dumps({"n": 1000, "precision": "bf16", **settings}))
    return folder


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
