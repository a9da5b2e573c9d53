"""certify.py's speed options and PREDICT mode through the real config tree: precision, layout, ISS,
mode=predict, their records in settings.json, resume refusals, bad values and non-finite networks."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from rs_testing import REPO, certify_config, train_config

from rs_lightning.analysis.protocol import check_protocol
from rs_lightning.analysis.run_view import load_runs
from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main as report_main
from rs_lightning.cli.train import train
from rs_lightning.models.checkpoint import CheckpointError
from rs_lightning.runs import COLUMNS, PREDICT_COLUMNS, ResultFileError, read_results
from rs_lightning.smoothing import CertificationSpec, NonFiniteLogitsError, Sequential
from rs_lightning.validation import ConfigError


def without_time(path) -> list[list[str]]:
    """A result file's lines split into fields, without the ``time`` column (wall-clock, never repeatable)."""
    drop = COLUMNS.index("time")
    return [f[:drop] + f[drop + 1 :] for f in (line.split("\t") for line in path.read_text().splitlines())]


SUBSET = ["n=400", "skip=9"]  # 40 of the 360 test digits


def test_bf16_channels_last_run_records_its_base_classifier_and_agrees_with_fp32(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    fp32 = certify(certify_config(tmp_path / "fp32", ckpt, SUBSET))
    bf16 = certify(certify_config(tmp_path / "bf16", ckpt, [*SUBSET, "precision=bf16", "channels_last=true"]))
    settings = json.loads((tmp_path / "bf16" / "settings.json").read_text())
    assert (settings["precision"], settings["channels_last"], settings["compile"]) == ("bf16", True, False)
    assert fp32["settings"]["precision"] == "32"
    a, b = read_results(tmp_path / "fp32" / "certify.tsv"), read_results(tmp_path / "bf16" / "certify.tsv")
    assert (a["idx"] == b["idx"]).all()
    # same noise, a slightly different function: nearly every count is unchanged, and never by much
    assert (a["predict"] == b["predict"]).mean() >= 0.95
    assert np.abs(a["nA"] - b["nA"]).max() <= 0.05 * 400
    assert abs(fp32["acr"] - bf16["acr"]) < 0.05
    with pytest.raises(ConfigError, match=r"precision: '32' there, 'bf16' now"):
        certify(certify_config(tmp_path / "fp32", ckpt, [*SUBSET, "precision=bf16"]))
    runs = load_runs([tmp_path / "fp32", tmp_path / "bf16"])
    for run in runs:
        run.label = run.name
    with pytest.raises(ResultFileError, match=r"precision: fp32: 32, bf16: bf16"):
        check_protocol(runs)


def test_iss_run_records_per_input_draws_and_refuses_a_resume_with_other_sampling(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    overrides = ["n=10000", "skip=9", "sampling=iss", "iss.max_decline=0.05"]
    summary = certify(certify_config(tmp_path, ckpt, overrides))
    settings = summary["settings"]
    assert settings["sampling"] == "iss" and settings["n0"] is None
    assert settings["sampler"] == {
        "decline": "ad",
        "max_decline": 0.05,
        "k0": 100,
        "granularity": 20,
        "reuse_pilot": False,
    }
    rows = read_results(tmp_path / "certify.tsv")
    assert (
        (rows["n"] <= 10_000).all()
        and (rows["n0"] == 100).all()
        and (rows["samples"] == 100 + rows["n"]).all()
    )
    assert rows["n"].mean() < 10_000 and summary["mean_n"] == pytest.approx(rows["n"].mean())
    assert len(np.unique(rows["n"])) > 1  # the sample size is input-specific
    pa_hat = np.divide(rows["nA"], rows["n"], out=np.zeros(len(rows["n"])), where=rows["n"] > 0)
    np.testing.assert_allclose(rows["pA_hat"], pa_hat)
    assert summary["throughput"]["inputs_per_s"] > 0 and summary["throughput"]["samples_per_s"] > 0
    with pytest.raises(ConfigError, match=r"sampling: 'iss' there, 'cohen' now"):
        certify(certify_config(tmp_path, ckpt, ["n=10000", "skip=9"]))
    # the report reads per-row n (ECDF, budget conversion) and labels the sampling
    assert report_main([str(tmp_path), "--out", str(tmp_path / "report"), "--budgets", "1000", "10000"]) == 0
    text = (tmp_path / "report" / "report.md").read_text()
    assert "iss(ad 0.05, k0=100); mean n" in text and (tmp_path / "report" / "budget.csv").stat().st_size > 0
    with pytest.raises(ConfigError, match=r"sampler: .*'max_decline': 0.05.* there, .*'max_decline': 0.1"):
        certify(certify_config(tmp_path, ckpt, [*overrides[:3], "iss.max_decline=0.1"]))


def test_predict_mode_writes_predict_tsv_and_resumes(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    overrides = ["mode=predict", "n=200", "alpha=0.001", "skip=6"]
    full = certify(certify_config(tmp_path / "full", ckpt, overrides))
    assert full["num_inputs"] == 60 and full["accuracy"] > 0.85 and 0 <= full["abstain_rate"] < 0.2
    assert full["accuracy"] + full["abstain_rate"] + full["error_rate"] == pytest.approx(1.0)
    lines = (tmp_path / "full" / "predict.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(PREDICT_COLUMNS) and len(lines) == 61
    assert not (tmp_path / "full" / "certify.tsv").exists()
    certify(certify_config(tmp_path / "part", ckpt, [*overrides[:3], "skip=6", "max=120"]))
    path = tmp_path / "part" / "predict.tsv"
    path.write_text(path.read_text()[:-5])  # killed mid-row
    with pytest.warns(UserWarning, match="incomplete last row"):
        resumed = certify(certify_config(tmp_path / "part", ckpt, overrides))
    a, b = read_results(tmp_path / "full" / "predict.tsv", ("idx",)), read_results(path, ("idx",))
    order = np.argsort(b["idx"])
    for column in ("idx", "predict", "nA", "nB"):
        np.testing.assert_array_equal(b[column][order], a[column])
    assert resumed["accuracy"] == full["accuracy"]
    with pytest.raises(ConfigError, match=r"mode: 'predict' there, 'certify' now"):
        certify(certify_config(tmp_path / "full", ckpt, ["n=200", "skip=6"]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["sigma=nan", "override_sigma=true"], "sigma=nan is invalid: sigma must be a finite number > 0"),
        (["sigma=inf", "override_sigma=true"], "sigma=inf is invalid: sigma must be a finite number > 0"),
        (["precision=16"], "precision='16' is invalid: precision must be 32 or bf16 on a CPU"),
        (["precision=fp8"], "precision='fp8' is invalid: precision must be one of 32, bf16, 16"),
        (["sampling=adaptive"], "sampling='adaptive' is invalid: sampling must be one of cohen, iss"),
        (["sampling=iss", "iss.max_decline=0"], "iss.max_decline=0 is invalid: iss.max_decline must be > 0"),
        (["sampling=iss", "iss.decline=rd", "iss.max_decline=1"], "iss.max_decline=1 is invalid"),
        (
            ["sampling=iss", "n=1000", "iss.k0=1000"],
            "iss.k0=1000 is invalid: iss.k0 must be an integer in [1, n)",
        ),
        (["sampling=iss", "iss.k0=0"], "iss.k0=0 is invalid"),
        (["sampling=iss", "n0=100"], "n0=100 is invalid: n0 must be unset with sampling=iss"),
        (["mode=predict", "n0=100"], "n0=100 is invalid: n0 must be unset with mode=predict"),
        (["mode=estimate"], "mode='estimate' is invalid"),
        (["compile=maybe"], "compile='maybe' is invalid: compile must be true or false"),
    ],
)
def test_bad_speed_and_mode_values_fail_before_any_work(tmp_path, overrides, message):
    """The checkpoint does not exist: each value check must come first, with one message."""
    with pytest.raises(ConfigError) as err:
        certify(certify_config(tmp_path, tmp_path / "missing.ckpt", overrides))
    assert str(err.value).startswith(message)
    assert not any(tmp_path.iterdir())


def test_cli_prints_one_line_errors_for_bad_speed_options(tmp_path):
    for overrides, message in (
        (["precision=16"], "error: precision='16' is invalid"),
        (["sampling=iss", "iss.max_decline=-1"], "error: iss.max_decline=-1 is invalid"),
    ):
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "certify.py"),
                f"checkpoint={tmp_path}/x.ckpt",
                *overrides,
                f"hydra.run.dir={tmp_path}/out",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and done.stderr.startswith(message) and done.stderr.count("\n") == 1


def _with_weights(trained_digits, tmp_path, name, change) -> str:
    checkpoint = torch.load(trained_digits["checkpoint"], weights_only=True)
    key = (
        "model.1.classifier.3.weight"  # DigitsCNN's last layer (the classifier is Sequential(normalize, net))
    )
    assert key in checkpoint["state_dict"], list(checkpoint["state_dict"])
    change(checkpoint["state_dict"][key])
    path = tmp_path / name
    torch.save(checkpoint, path)
    return str(path)


def test_non_finite_networks_are_refused(trained_digits, tmp_path):
    """A diverged checkpoint (NaN weights) is refused at load; finite weights whose logits overflow stop the
    engine naming the input — never a constant class-0 'certificate'."""
    nan = _with_weights(trained_digits, tmp_path, "nan.ckpt", lambda w: w.view(-1)[0].fill_(float("nan")))
    with pytest.raises(CheckpointError, match=r"non-finite values \(NaN/inf\) in .*weight"):
        certify(certify_config(tmp_path / "a", nan, ["n=50", "max=3"]))
    huge = _with_weights(trained_digits, tmp_path, "huge.ckpt", lambda w: w.fill_(3e38))
    with pytest.raises(NonFiniteLogitsError, match="input idx 0"):
        certify(certify_config(tmp_path / "b", huge, ["n=50", "max=3"]))
    assert read_results(tmp_path / "b" / "certify.tsv")["idx"].size == 0


def test_callback_at_bf16_equals_certify_py_at_bf16(tmp_path):
    """The callback takes the same precision key and builds the same rows as certify.py."""
    from rs_lightning.callbacks import CertificationCallback

    settings = ["num_inputs=12", "n=120", "batch_size=500", "precision=bf16", "channels_last=true"]
    result = train(
        train_config(
            tmp_path / "train",
            ["optim.max_epochs=2", "logger=none"] + [f"callbacks.certification.{s}" for s in settings],
        )
    )
    callback = CertificationCallback(
        num_inputs=12, n=120, batch_size=500, precision="bf16", channels_last=True
    )
    overrides = [f"{k}={v}" for k, v in callback.certify_command_args(360).items()]
    summary = certify(
        certify_config(tmp_path / "cert", result["checkpoint"], [*overrides, "channels_last=true"])
    )
    assert summary["settings"]["precision"] == "bf16" and summary["num_inputs"] == 12
    assert result["metrics"]["val/acr"] == pytest.approx(summary["acr"], abs=1e-6)
    assert result["metrics"]["val/pa_mean"] == pytest.approx(summary["pa_mean"], abs=1e-6)


def test_callback_rejects_bad_precision_with_its_prefix():
    from rs_lightning.callbacks import CertificationCallback

    with pytest.raises(ConfigError, match=r"^callbacks\.certification\.precision='fp8'"):
        CertificationCallback(precision="fp8")


def test_resume_on_another_dataset_is_refused(tmp_path):
    """A folder's rows are of one dataset: resuming on another (here another digits split, so the same idx
    would be another image) is refused, naming the data."""
    constant = ["model=constant", "sigma=0.25", "n=50", "data=digits"]
    certify(certify_config(tmp_path, "null", [*constant, "max=3"]))
    with pytest.raises(ConfigError, match=r"data: .*'split_seed': 0.* there, .*'split_seed': 1.* now"):
        certify(certify_config(tmp_path, "null", [*constant, "data.split_seed=1", "max=6"]))


def test_radius_step_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match=r"^radius_step=0 is invalid: radius_step must be > 0"):
        certify(certify_config(tmp_path, tmp_path / "missing.ckpt", ["radius_step=0"]))


def test_train_cli_reports_bad_callback_values_in_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "callbacks.certification.precision=fp8",
            f"hydra.run.dir={tmp_path}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: callbacks.certification.precision='fp8'")


# ---------------------------------------------------------------- sampling=sequential

SEQUENTIAL = ["n=5000", "skip=9", "sampling=sequential", "batch_size=500"]


def test_sequential_run_records_its_grid_resumes_and_refuses_another(trained_digits, tmp_path):
    """settings.json holds the resolved grid; a killed run (torn last row) resumes to the rows of an
    uninterrupted run; a resume with another grid, and rows whose n is not a look, are refused."""
    ckpt = trained_digits["checkpoint"]
    summary = certify(certify_config(tmp_path / "a", ckpt, SEQUENTIAL))
    settings = json.loads((tmp_path / "a" / "settings.json").read_text())
    assert settings["sampling"] == "sequential" and settings["n0"] == 100
    assert settings["sampler"] == {
        "radii": [0.0, 0.25, 0.5],
        "first_look": 256,
        "growth": 1.5,
        "beta": 0.05,
        "alpha_spending": "selection",
        "abstain_after": None,
        "futility": True,
    }
    rows = read_results(tmp_path / "a" / "certify.tsv")
    assert summary["mean_n"] == pytest.approx(rows["n"].mean()) and rows["n"].mean() < 5000
    # the run reports its distance from the oracle floor (from its own rows)
    recorded = CertificationSpec(
        sigma=settings["sigma"],
        n0=100,
        n=5000,
        alpha=settings["alpha"],
        sampler=Sequential(**(settings["sampler"] | {"radii": (0.0, 0.25, 0.5)})),
    )
    floor = recorded.sampler.oracle_floor(recorded, rows["nA"], rows["n"], 64)
    assert summary["mean_oracle_floor"] == pytest.approx(floor.mean()) and 0 < floor.mean() <= 5000
    assert summary["draws_over_floor"] == pytest.approx(rows["n"].mean() / floor.mean())
    assert set(np.unique(rows["n"])) <= {256, 512, 768, 1280, 2048, 3072, 5000}
    # resume: a run killed mid-row, then rerun, equals the uninterrupted one (and a grid change is refused)
    lines = (tmp_path / "a" / "certify.tsv").read_text().splitlines()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "certify.tsv").write_text("\n".join(lines[:15]) + "\n" + lines[15][:9])
    certify(certify_config(tmp_path / "b", ckpt, SEQUENTIAL))
    assert without_time(tmp_path / "b" / "certify.tsv") == without_time(tmp_path / "a" / "certify.tsv")
    with pytest.raises(ConfigError, match=r"sampler: .* there, .* now"):
        certify(certify_config(tmp_path / "a", ckpt, [*SEQUENTIAL, "sequential.radii=[0,0.25]"]))
    (tmp_path / "b" / "settings.json").unlink()  # without settings: rows' n must be looks of this run
    with pytest.raises(ConfigError, match=r"holds rows with n=.* this run has n at a look \(.*, 6000\)"):
        certify(certify_config(tmp_path / "b", ckpt, [*SEQUENTIAL, "n=6000"]))


def test_sequential_parts_equal_a_single_run_and_the_report_reads_it(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    certify(certify_config(tmp_path / "one", ckpt, SEQUENTIAL))
    for part in ("0/2", "1/2"):
        certify(certify_config(tmp_path / "parts", ckpt, [*SEQUENTIAL, f"shard={part}"]))
    drop_time = lambda p: [  # noqa: E731
        "\t".join(f for j, f in enumerate(line.split("\t")) if j != 5) for line in p.read_text().splitlines()
    ]
    assert drop_time(tmp_path / "parts" / "certify.tsv") == drop_time(tmp_path / "one" / "certify.tsv")
    assert report_main([str(tmp_path / "one"), "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r" / "report.md").read_text()
    described = "sequential(3 radii up to 0.5, first look 256, x1.5, beta 0.05, alpha by selection, futility)"
    assert f"{described}; mean n" in text and "; draws / oracle floor " in text


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["sequential.radii=[0,2]"], "sequential.radii=[0.0, 2.0] is invalid"),
        (["sequential.radii=[0.5,0.25]"], "increasing order"),
        (["sequential.growth=1"], "sequential.growth=1"),
        (["sampling=cohen", "sequential.radii=[0,0.25]"], "sequential.radii=[0, 0.25] is invalid"),
        (["sampling=cohen", "sequential.growth=2"], "left at its default unless sampling=sequential"),
    ],
)
def test_bad_sequential_settings_are_refused_before_any_work(trained_digits, tmp_path, overrides, needle):
    with pytest.raises(ConfigError) as err:
        certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SEQUENTIAL, *overrides]))
    assert needle in str(err.value)
    assert not (tmp_path / "certify.tsv").exists()


# ---------------------------------------------------------------- precision=auto


def test_precision_auto_picks_the_fastest_records_it_and_a_resume_keeps_it(
    trained_digits, tmp_path, monkeypatch
):
    """The choice is the candidate with the highest measured rate, recorded with every rate; the run is
    then certified at it (its settings and rows are those of that precision); a resume does not time again,
    even if the machine would now choose otherwise. Catches: a choice that is not the fastest, a run that
    certifies at another precision than it records, and a resume that mixes precisions in one file."""
    import rs_lightning.cli.certify as cli

    ckpt = trained_digits["checkpoint"]
    auto = ["n=400", "skip=30", "precision=auto", "channels_last=auto"]
    summary = certify(certify_config(tmp_path / "auto", ckpt, auto))
    record = summary["settings"]["auto"]
    rates = record["samples_per_s"]
    assert set(rates) == {"fp32", "fp32+cl", "bf16", "bf16+cl"}
    best = max(rates, key=rates.get)
    assert cli.label(record["precision"], record["channels_last"]) == best
    assert (summary["settings"]["precision"], summary["settings"]["channels_last"]) == (
        record["precision"],
        record["channels_last"],
    )
    explicit = [f"precision={record['precision']}", f"channels_last={str(record['channels_last']).lower()}"]
    certify(certify_config(tmp_path / "explicit", ckpt, [*auto[:2], *explicit]))
    assert without_time_rows(tmp_path / "auto") == without_time_rows(tmp_path / "explicit")

    def no_timing(*args, **kwargs):
        raise AssertionError("a resume timed the candidates again")

    monkeypatch.setattr(cli, "fastest", no_timing)
    rows = (tmp_path / "auto" / "certify.tsv").read_text().splitlines()
    (tmp_path / "auto" / "certify.tsv").write_text("\n".join(rows[:5]) + "\n")  # killed after 4 rows
    certify(certify_config(tmp_path / "auto", ckpt, auto))
    assert without_time_rows(tmp_path / "auto") == without_time_rows(tmp_path / "explicit")
    with pytest.raises(
        ConfigError, match=r"^precision='auto' is invalid: precision must be chosen explicitly"
    ):
        certify(certify_config(tmp_path / "ddp", ckpt, [*auto, "trainer=ddp_sim"]))


def without_time_rows(folder) -> list[str]:
    return [
        "\t".join(f for j, f in enumerate(line.split("\t")) if j != 5)
        for line in (folder / "certify.tsv").read_text().splitlines()
    ]
