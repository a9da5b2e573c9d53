"""``python -m rs_lightning.cli.report``: the trivial classifier certified without a checkpoint, the budget
view, the comparison report's files, the protocol refusal, old Cohen TSVs, W&B, overwrite protection."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest
from omegaconf import open_dict
from rs_testing import REPO, certify_config, compose_config

from rs_lightning.analysis.budget import class_shares, constant_classifier_acr
from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main
from rs_lightning.cli.report.compare import report
from rs_lightning.cli.report.loading import load
from rs_lightning.runs import read_results
from rs_lightning.validation import ConfigError

CONSTANT = ["checkpoint=null", "model=constant", "data=digits", "sigma=0.25", "n0=10"]


def constant_config(out, *overrides: str):
    cfg = compose_config("certify", [*CONSTANT, "n=1000", "max=60", f"output_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.device = "cpu"
    return cfg


@pytest.fixture(scope="module")
def constant_runs(tmp_path_factory) -> dict:
    """model=constant on digits: label 0 and label 3 (same protocol), and one at another N."""
    root = tmp_path_factory.mktemp("constant")
    runs = {
        "c0": (root / "c0", []),
        "c3": (root / "c3", ["model.label=3"]),
        "n2000": (root / "n2000", ["n=2000"]),
        "max40": (root / "max40", ["max=40"]),
    }
    return {name: (certify(constant_config(out, *extra)), out) for name, (out, extra) in runs.items()}


def test_constant_classifier_acr_equals_the_closed_form(constant_runs):
    """Sun et al. 2025, Theorem 1: ACR(h ≡ c) = π_c·σ·Φ⁻¹(α^(1/N)), π_c over the certified inputs."""
    for name, label, n in (("c0", 0, 1000), ("c3", 3, 1000), ("n2000", 0, 2000)):
        summary, out = constant_runs[name]
        rows = read_results(out / "certify.tsv")
        share = class_shares(rows["label"])[label]
        closed = constant_classifier_acr(share, 0.25, 0.001, n)
        assert summary["acr"] == pytest.approx(closed, rel=1e-9)  # the TSV keeps 10 significant digits
        cap = f"{constant_classifier_acr(1.0, 0.25, 0.001, n):.10g}"
        assert {f"{r:.10g}" for r in rows["radius"][rows["label"] == label]} == {cap}
        assert (rows["correct"] == (rows["label"] == label)).all() and (rows["nA"] == n).all()
        settings = json.loads((out / "settings.json").read_text())
        assert settings["checkpoint"] is None and settings["checkpoint_sha256"] is None
        assert settings["model"] == {
            "_target_": "rs_lightning.models.constant.ConstantClassifier",
            "label": label,
        }


def test_budget_view_puts_the_constant_run_on_its_closed_form(constant_runs, tmp_path, capsys):
    summary, run = constant_runs["c0"]
    assert main(["budget", str(run), "--out", str(tmp_path / "b"), "--budgets", "100", "100000"]) == 0
    printed = capsys.readouterr().out
    assert "(= N)" in printed
    assert "biased upward: inputs with p̂ = 1 are assumed to have p_A = 1" in printed
    with (tmp_path / "b" / "budget.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["budget"] for r in rows} == {"100", "1000", "100000"}
    for row in rows:
        assert float(row["acr"]) == pytest.approx(float(row["constant_acr"]), rel=1e-12)
        assert (row["extrapolated"] == "True") == (row["budget"] == "100000")
    own = [r for r in rows if r["budget"] == "1000" and r["rule"] == "plugin"][0]
    assert float(own["acr"]) == pytest.approx(summary["acr"], rel=1e-9)
    assert (tmp_path / "b" / "budget_acr.png").stat().st_size > 0


def test_budget_below_one_is_refused(constant_runs, capsys):
    with pytest.raises(SystemExit) as err:
        main(["budget", str(constant_runs["c0"][1]), "--budgets", "0"])
    assert err.value.code == 2 and "N'=0.0 is invalid" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["model=digits_cnn", "data=digits", "sigma=0.25"],
            r"^checkpoint=None is invalid: .*"
            r"its weights would be random; pass checkpoint=",
        ),
        (["model=constant", "sigma=0.25"], r"^data=None is invalid"),
        (["model=constant", "data=digits"], r"^sigma=None is invalid"),
        (["data=digits", "sigma=0.25"], r"^model=None is invalid"),
    ],
)
def test_certify_without_checkpoint_needs_a_parameter_free_model_data_and_sigma(tmp_path, overrides, message):
    cfg = compose_config(
        "certify", ["checkpoint=null", *overrides, "n=100", "max=5", f"output_dir={tmp_path}"]
    )
    with pytest.raises(ConfigError, match=message):
        certify(cfg)
    assert not (tmp_path / "certify.tsv").exists()


def test_constant_run_resume_checks_the_model(tmp_path):
    certify(constant_config(tmp_path, "max=5", "n=100"))
    with pytest.raises(ConfigError, match=r"model: .*label.*0.*label.*3"):
        certify(constant_config(tmp_path, "max=5", "n=100", "model.label=3"))


def test_a_checkpoint_and_a_model_are_not_combined(trained_digits, tmp_path):
    with pytest.raises(ConfigError, match=r"^model='rs_lightning.models.constant.ConstantClassifier'"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], ["model=constant", "max=5"]))


def test_report_writes_its_files_and_refuses_to_overwrite(constant_runs, tmp_path, capsys):
    out = tmp_path / "report"
    runs = [str(constant_runs["c0"][1]), str(constant_runs["c3"][1])]
    assert main([*runs, "--out", str(out), "--budgets", "100", "10000"]) == 0
    for name in (
        "report.md",
        "table.csv",
        "dominance.csv",
        "budget.csv",
        "pa_ecdf_sigma0.25.png",
        "budget_acr.png",
    ):
        assert (out / name).stat().st_size > 0, name
    text = (out / "report.md").read_text()
    assert "PROTOCOL MISMATCH" not in text and "All runs share" in text
    assert "ConstantClassifier σ=0.25 (constant" in text  # label from settings["model"], made unique
    with (out / "dominance.csv").open() as f:
        (pair,) = list(csv.DictReader(f))
    assert pair["relation"] in ("dominates", "dominated") and pair["acr_disagrees"] == "False"
    with (out / "table.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [float(r["acr"]) for r in table] == [constant_runs["c0"][0]["acr"], constant_runs["c3"][0]["acr"]]
    capsys.readouterr()
    before = (out / "report.md").stat().st_mtime_ns
    assert main([*runs, "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err and (out / "report.md").stat().st_mtime_ns == before
    stale = out / "certified_accuracy_sigma9.png"  # a σ the new report lacks
    kept = out / "notes.txt"  # not a report file
    stale.write_bytes(b"old"), kept.write_text("mine")
    assert main([*runs, "--out", str(out), "--overwrite"]) == 0
    assert not stale.exists() and kept.read_text() == "mine"


@pytest.mark.parametrize(
    ("other", "key", "keys"), [("n2000", "n", "n"), ("max40", "subset", "subset, inputs_sha256")]
)
def test_report_refuses_a_mismatched_protocol_unless_allowed(
    constant_runs, tmp_path, capsys, other, key, keys
):
    runs = [str(constant_runs["c0"][1]), str(constant_runs[other][1])]
    assert main([*runs, "--out", str(tmp_path / "refused")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the runs were certified under different protocols") and f"{key}:" in err
    assert "--allow-mismatch" in err and err.count("\n") == 1 and not (tmp_path / "refused").exists()
    assert main([*runs, "--out", str(tmp_path / "allowed"), "--allow-mismatch"]) == 0
    text = (tmp_path / "allowed" / "report.md").read_text()
    assert text.splitlines()[2].startswith("> **⚠ PROTOCOL MISMATCH") and f"**{key} differs**" in text
    with (tmp_path / "allowed" / "table.csv").open() as f:
        assert [r["protocol"] for r in csv.DictReader(f)] == ["reference", f"differs: {keys}"]
    if key == "subset":  # a paired verdict needs the same inputs: named, not computed
        assert "Not compared: " in text and "(certified on different inputs)" in text


def test_old_cohen_tsv_report_says_what_it_cannot_compute(tmp_path):
    tsv = tmp_path / "noise_0.25.tsv"
    tsv.write_text(
        "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
        "0\t3\t3\t0.512\t1\t0:00:01.250000\n20\t8\t-1\t0.0\t0\t0:00:01.100000\n40\t0\t0\t0.91\t1\t0:00:01\n"
    )
    out = tmp_path / "report"
    assert main([str(tsv), "--out", str(out), "--sigma", "0.25", "--radii", "0", "0.5"]) == 0
    text = (out / "report.md").read_text()
    assert "old Cohen-format TSV without nA/n columns" in text and "pA ECDF" in text
    assert "No budget conversion" in text and "nA/n columns" in text and not list(out.glob("pa_ecdf*.png"))
    with (out / "table.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert float(row["acr"]) == pytest.approx((0.512 + 0.91) / 3) and row["ca@0.5"] == str(2 / 3)
    assert row["y(0.5)"] == ""


def test_report_of_a_trained_run_against_the_constant_classifier(trained_digits, tmp_path, monkeypatch):
    """Same protocol; the label comes from the checkpoint's method; W&B gets the table offline."""
    common = ["n=500", "skip=6", "n0=10"]
    certify(certify_config(tmp_path / "trained", trained_digits["checkpoint"], common))
    cfg = compose_config("certify", [*CONSTANT, *common, f"output_dir={tmp_path / 'constant'}"])
    with open_dict(cfg):
        cfg.device = "cpu"
    certify(cfg)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "report"
    assert main([str(tmp_path / "trained"), str(tmp_path / "constant"), "--out", str(out), "--wandb"]) == 0
    text = (out / "report.md").read_text()
    assert "GaussianAugmentation σ=0.25" in text and "ConstantClassifier σ=0.25" in text
    assert list((out / "wandb").glob("offline-run-*/*.wandb")), "no offline W&B run"
    with (out / "table.csv").open() as f:
        trained, constant = list(csv.DictReader(f))
    assert float(trained["ca@0"]) > 0.85 and float(constant["ca@0"]) < 0.2
    assert np.isclose(float(trained["y(0.5)"]), float(trained["ca@0"]))


def test_an_archived_run_folder_keeps_its_method_label(trained_digits, tmp_path):
    """certify.py records the training method in settings.json, so a run folder copied without its checkpoint
    (results archived next to the docs) is still labelled by its method, not by its folder name."""
    run = tmp_path / "trained"
    certify(certify_config(run, trained_digits["checkpoint"], ["n=100", "skip=60", "n0=10"]))
    settings = json.loads((run / "settings.json").read_text())
    assert settings["method"] == "GaussianAugmentation"
    archived = tmp_path / "archive" / "gaussian_run"
    archived.mkdir(parents=True)
    (archived / "certify.tsv").write_text((run / "certify.tsv").read_text())
    settings["checkpoint"] = str(tmp_path / "gone.ckpt")
    (archived / "settings.json").write_text(json.dumps(settings))
    (label,) = [r.label for r in load([str(archived)], None)]
    assert label == "GaussianAugmentation σ=0.25"
    del settings["method"]  # a folder certified before the key existed, checkpoint gone: the folder name
    (archived / "settings.json").write_text(json.dumps(settings))
    assert [r.label for r in load([str(archived)], None)] == ["gaussian_run σ=0.25"]


def test_module_entry_point_reports_errors_in_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "rs_lightning.cli.report", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.strip() == f"error: {tmp_path / 'nope'} does not exist"


def test_report_flags_an_acr_order_that_contradicts_ecdf_dominance(constant_runs, tmp_path):
    """A copy of a run certified at N = 100,000 with p̂ = 1 − 1/N instead of 1: its ECDF is dominated, yet its
    ACR is larger (the radius cap grows with N). Rows are what CERTIFY writes (the report checks them)."""
    from rs_lightning.runs import COLUMNS, ResultWriter
    from rs_lightning.smoothing.certificate import Certificate
    from rs_lightning.smoothing.stats import clopper_pearson_lower

    source = constant_runs["c0"][1]
    boosted, n = tmp_path / "boosted", 100_000
    boosted.mkdir()
    settings = json.loads((source / "settings.json").read_text())
    (boosted / "settings.json").write_text(json.dumps({**settings, "n": n}))
    rows = read_results(source / "certify.tsv")
    lower = float(clopper_pearson_lower(n - 1, n, settings["alpha"]))
    with ResultWriter(boosted / "certify.tsv") as writer:
        for j in range(rows["idx"].size):
            radius = float(Certificate().radius(lower, settings["sigma"]))  # the constant certifies all
            row = {c: rows[c][j] for c in COLUMNS}
            writer.write(
                row | {"n": n, "nA": n - 1, "pA_lower": lower, "pA_hat": (n - 1) / n, "radius": radius}
            )
    out = tmp_path / "report"
    assert main([str(source), str(boosted), "--out", str(out), "--allow-mismatch"]) == 0
    text = (out / "report.md").read_text()
    # the point estimates disagree (kept in dominance.csv and the appendix) ...
    with (out / "dominance.csv").open() as f:
        (pair,) = list(csv.DictReader(f))
    assert pair["relation"] == "dominates" and pair["acr_disagrees"] == "True"
    assert "## Appendix: point estimates of the p_A curves (not verdicts)" in text
    # ... but on 36 inputs the p_A difference (at pA = 1 only) is not resolved, while ACR's is
    with (out / "verdicts.csv").open() as f:
        (verdict,) = list(csv.DictReader(f))
    assert verdict["pa_verdict"] == "unresolved" and float(verdict["acr_difference_hi"]) < 0
    assert "No resolved p_A verdict contradicts the ACR order" in text


def test_report_shows_bands_and_verdicts_and_refuses_other_data(constant_runs, tmp_path, capsys):
    """The report writes the bands (table columns, shaded figures) and resolved verdicts
    (verdicts.csv); a bad --beta is one line; two runs with the same idx but other test inputs
    (inputs_sha256) are refused, naming the key."""
    c0, c3 = str(constant_runs["c0"][1]), str(constant_runs["c3"][1])
    out = tmp_path / "r"
    assert main([c0, c3, "--out", str(out), "--beta", "0.1"]) == 0
    with (out / "table.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["acr_lo"]) <= float(r["acr"]) <= float(r["acr_hi"]) for r in rows)
    assert all(0 < float(r["pa_band"]) <= 1 and 0 < float(r["ca_band"]) <= 1 for r in rows)
    with (out / "verdicts.csv").open() as f:
        (verdict,) = list(csv.DictReader(f))
    assert verdict["covers"] == "test inputs only (one seed)" and float(verdict["level"]) == 0.1
    text = (out / "report.md").read_text()
    assert "Resolved verdicts (β = 0.1" in text and "p_A band of ±" in text  # 36 inputs: a wide band, named
    assert (out / "certified_accuracy_sigma0.25.png").is_file()
    for bad in ("0", "1.5", "abc"):
        assert main([c0, c3, "--out", str(tmp_path / f"b{bad}"), "--beta", bad]) == 2
        assert capsys.readouterr().err.startswith(f"error: beta='{bad}' is invalid")
    other = tmp_path / "other"
    other.mkdir()
    for name in ("certify.tsv", "summary.json"):
        (other / name).write_text((constant_runs["c3"][1] / name).read_text())
    settings = json.loads((constant_runs["c3"][1] / "settings.json").read_text())
    (other / "settings.json").write_text(json.dumps(settings | {"inputs_sha256": "0" * 64}))
    assert main([c0, str(other), "--out", str(tmp_path / "x")]) == 2
    assert "inputs_sha256:" in capsys.readouterr().err


# ---------------------------------------------------- report paired (was scripts/acr_difference_ci.py)


def _rows(folder, radii, correct, idx=None):
    from rs_lightning.runs import ResultWriter

    idx = range(len(radii)) if idx is None else idx
    with ResultWriter(folder / "certify.tsv") as writer:
        for i, r, c in zip(idx, radii, correct, strict=True):
            writer.write(
                dict(
                    idx=i,
                    label=0,
                    predict=0 if c else 1,
                    radius=r,
                    correct=c,
                    time=0.0,
                    nA=90,
                    n=100,
                    pA_lower=0.8,
                    pA_hat=0.9,
                    n0=10,
                    nA0=9,
                    samples=110,
                    flagged=0,
                )
            )
    return folder


def test_paired_counts_wrong_inputs_as_zero_and_brackets_the_mean(tmp_path, capsys):
    rng = np.random.default_rng(1)
    radii = rng.uniform(0, 1, 200)
    a = _rows(tmp_path / "a", radii, [1] * 200)
    # b: the same radii, but the first 50 inputs wrong (radius counts 0), paired by idx in another order
    order = rng.permutation(200)
    b = _rows(tmp_path / "b", radii[order], [int(i >= 50) for i in order], idx=order.tolist())
    assert main(["paired", str(a), str(b / "certify.tsv")]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    mean, low, high = (float(v.strip("[],")) for v in np.array(line.split())[[4, 7, 8]])
    assert mean == pytest.approx(radii[:50].sum() / 200, abs=5e-5)
    assert low < mean < high and high - low < 0.1


def test_paired_identical_runs_and_certified_accuracy_at_radii(tmp_path, capsys):
    """Identical runs: a zero-width interval. --radii: the per-input term is 1[certified correct with radius
    >= R]; a has 3 of 4 at r >= 0.4, b 1: +0.5 at 0.4, and +0.25 at 0 (b's one wrong input)."""
    a = _rows(tmp_path / "a", [0.5, 0.45, 0.4, 0.1], [1, 1, 1, 1])
    b = _rows(tmp_path / "b", [0.5, 0.45, 0.2, 0.1], [1, 0, 1, 1])
    assert main(["paired", str(a), str(a)]) == 0
    assert "+0.0000  0.95 CI [+0.0000, +0.0000]  (4 inputs)" in capsys.readouterr().out
    assert main(["paired", str(a), str(b), "--radii", "0", "0.4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("certified accuracy at r=0: ") and "+0.2500" in out[1]
    assert out[2].startswith("certified accuracy at r=0.4: ") and "+0.5000" in out[2]


def test_paired_takes_every_job_of_a_multirun_folder_and_one_reference(tmp_path, capsys):
    """Catches an OTHER multirun folder reduced to its first job (each path was loaded as one run, silently),
    and a REFERENCE folder holding several runs taken as its first."""
    a = _rows(tmp_path / "a", [0.5, 0.4], [1, 1])
    sweep = tmp_path / "sweep"
    for job, radii in (("0_sigma-0.25", [0.5, 0.1]), ("1_sigma-0.5", [0.2, 0.2])):
        (sweep / job).mkdir(parents=True)
        _rows(sweep / job, radii, [1, 1])
    assert main(["paired", str(a), str(sweep)]) == 0
    out = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ACR: ")]
    assert [line.split(": ")[1] for line in out] == [
        f"{a} - {sweep / job}" for job in ("0_sigma-0.25", "1_sigma-0.5")
    ]
    assert "+0.1500" in out[0] and "+0.2500" in out[1]
    assert main(["paired", str(sweep), str(a)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith("it holds 2 runs; pass one of them as REFERENCE and the rest as OTHER_RUN")
    )


def test_paired_refuses_runs_on_other_inputs_and_bad_values(tmp_path, capsys):
    a = _rows(tmp_path / "a", [0.5], [1])
    b = _rows(tmp_path / "b", [0.5], [1], idx=[7])
    assert main(["paired", str(a), str(b)]) == 2
    assert "different protocols (subset: " in capsys.readouterr().err
    assert main(["paired", str(a), str(a), "--beta", "2"]) == 2
    assert main(["paired", str(a), str(a), "--radii", "-1"]) == 2


def test_paired_refuses_another_protocol_on_the_same_inputs(tmp_path, capsys):
    """Catches a paired CI between runs on the same idx but other data, n or noise (the report checked the
    protocol; `report paired` compared idx only). --compare-noises lets the noise, and only it, differ."""
    folder = REPO / "docs/results/noises/mnist_sigma050/runs"
    gaussian, laplace = str(folder / "gaussian"), str(folder / "laplace")
    assert main(["paired", gaussian, laplace]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and "noise: " in err and "--compare-noises" in err and err.count("\n") == 1
    )
    assert main(["paired", gaussian, laplace, "--compare-noises"]) == 0
    assert capsys.readouterr().out.startswith("ACR: ")
    other = tmp_path / "other_data"
    other.mkdir()
    for name in ("certify.tsv", "summary.json"):
        (other / name).write_bytes((folder / "gaussian" / name).read_bytes())
    settings = json.loads((folder / "gaussian" / "settings.json").read_text())
    settings["inputs_sha256"] = "0" * 64  # the same idx of another test set
    (other / "settings.json").write_text(json.dumps(settings))
    assert main(["paired", gaussian, str(other), "--compare-noises"]) == 2
    assert "inputs_sha256: " in capsys.readouterr().err


def test_compare_noises_reports_runs_that_differ_in_their_noise_only(tmp_path):
    """The archived MNIST sigma = 0.5 Gaussian and Laplace runs (L1 radii, same inputs and protocol):
    compared without the mismatch banner or a ``protocol`` column, with the note that their p_A are
    probabilities under different noises."""
    folder = REPO / "docs/results/noises/mnist_sigma050/runs"
    runs = [str(folder / noise) for noise in ("gaussian", "laplace")]
    result = report(runs, str(tmp_path / "out"), compare_noises=True, resamples=100)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "PROTOCOL MISMATCH" not in text and "differ in their smoothing noise on purpose" in text
    assert "**noise differs**" in text and "protocol" not in result["table"][0]
    assert [p["covers"] for p in result["verdicts"]] and not any(p.get("skipped") for p in result["verdicts"])
