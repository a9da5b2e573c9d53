"""The evidence generators (evidence/<study>/*.sh), their shared helpers (scripts/run_steps.sh) and job
handling, run with a stand-in interpreter that records every call: a failed background training fails the
script before any later stage, and only finished trainings (train.done) are certified."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rs_testing import REPO

STAND_IN = """#!{python}
import json, os, sys
from pathlib import Path
args = sys.argv[1:]
with open(os.environ["RECORD"], "a") as record:
    record.write(json.dumps(args) + "\\n")
options = dict(a.split("=", 1) for a in args if "=" in a)
if args and args[0] == "train.py":  # a checkpoint from some epoch exists, finished or not
    folder = Path(options["hydra.run.dir"]) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "last.ckpt").write_text("")
    sys.exit(int(os.environ.get("TRAIN_STATUS", "0")))
if "output_dir" in options:  # certify.py: the files certify() copies
    folder = Path(options["output_dir"]); folder.mkdir(parents=True, exist_ok=True)
    for name in ("certify.tsv", "settings.json", "summary.json"):
        (folder / name).write_text("")
"""
ENV = (
    "ONLY",
    "SIGMAS",
    "STAGE",
    "RUNS",
    "JOBS",
    "EXTRA",
    "DRY_RUN",
    "TRAIN_STATUS",
    "BUDGETS",
    "SKIP",
    "CHECKPOINT",
)


EVIDENCE = REPO / "evidence"
COMPARISON = "mnist_structured/mnist_comparison.sh"
FAST = "fast_certification/fast_certification.sh"
DENOISED = "denoised_smoothing/denoised_smoothing.sh"


def run_script(tmp_path: Path, script: str, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    stand_in, record = tmp_path / "python", tmp_path / "record.jsonl"
    stand_in.write_text(STAND_IN.format(python=sys.executable))
    stand_in.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if k not in ENV}
    environ |= {
        "PY": str(stand_in),
        "RECORD": str(record),
        "OUT": str(tmp_path / "out"),
        "ARCHIVE": str(tmp_path / "archive"),
        "REPORTS": str(tmp_path / "reports"),
        "TABLES": str(tmp_path / "tables"),
    } | env
    result = subprocess.run(
        ["bash", str(EVIDENCE / script)], capture_output=True, text=True, env=environ, timeout=120
    )
    calls = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return result, calls


@pytest.mark.parametrize(
    ("script", "env"),
    [
        ("mnist_structured/mnist_comparison.sh", {}),
        ("mnist_structured/acr_gaming_comparison.sh", {}),
        ("mnist_reproduction/mnist_reproduction.sh", {}),
        ("ars_clutter/ars_clutter.sh", {"STAGE": "all"}),
        ("ars_clutter/ars_clutter.sh", {"STAGE": "train"}),
        ("lattice_noise/lattice_noise.sh", {}),
    ],
)
def test_a_failed_background_training_fails_the_script_before_any_later_stage(tmp_path, script, env):
    """Catches: a bare `wait` (status 0) after the background jobs: a failed training went unnoticed, and
    mnist_comparison.sh went on to certify (and archive) the failed run's last.ckpt."""
    result, calls = run_script(tmp_path, script, TRAIN_STATUS="1", **env)
    assert result.returncode != 0 and "error: a background job failed" in result.stderr, result.stderr
    assert calls and all(call[0] == "train.py" for call in calls), calls  # no soft labels, certify, report


def test_only_finished_trainings_are_certified(tmp_path):
    """Catches: the certify stage picking every last.ckpt, i.e. also a run still training in another job
    (or one that failed), whose per-input rows then went into the archive as the method's."""
    out = tmp_path / "out" / "train"
    for run in ("gaussian_s025", "macer_s025"):
        (out / run / "checkpoints").mkdir(parents=True)
        (out / run / "checkpoints" / "last.ckpt").write_text("")
    (out / "gaussian_s025" / "train.done").write_text("")
    result, calls = run_script(tmp_path, COMPARISON, STAGE="certify", SIGMAS="025")
    assert result.returncode == 0, result.stderr
    assert [c[1] for c in calls] == [f"checkpoint={out}/gaussian_s025/checkpoints/last.ckpt"]
    assert sorted(os.listdir(tmp_path / "archive")) == ["gaussian_s025"]
    result, calls = run_script(tmp_path, COMPARISON, STAGE="certify", SIGMAS="025", ONLY="x")
    assert result.returncode == 0 and len(calls) == 1  # ONLY leaves both out


def test_certify_refuses_a_run_without_train_done_in_one_line(tmp_path):
    (tmp_path / "out" / "train" / "acr_gaming_s025" / "checkpoints").mkdir(parents=True)
    script = tmp_path / "certify_one.sh"
    script.write_text(f"source {EVIDENCE}/common/mnist_common.sh\ncertify acr_gaming_s025\n")
    result, calls = run_script(tmp_path, str(script))
    assert result.returncode == 1 and not calls
    assert result.stderr.strip().splitlines() == [
        f"error: acr_gaming_s025 has not finished training ({tmp_path}/out/train/acr_gaming_s025/train.done "
        "is missing); train it first"
    ]


@pytest.mark.parametrize(
    ("script", "env", "trained"),
    [
        ("fast_certification/fast_certification.sh", {"STAGE": "headline"}, "train/mnist_lenet_s050"),
        ("fast_certification/fast_certification.sh", {"STAGE": "samples"}, "train/mnist_lenet_s050"),
        ("sequential/sequential_certification.sh", {"STAGE": "certify"}, "train/mnist_lenet_s025"),
        ("noises/noise_comparison.sh", {"STAGE": "certify"}, "train/gaussian"),
        ("lattice_noise/lattice_noise.sh", {"STAGE": "certify"}, "gaussian/train"),
        ("ars_clutter/ars_clutter.sh", {"STAGE": "certify", "RUNS": "ars"}, "ars/train"),
        ("ars_clutter/ars_clutter.sh", {"STAGE": "masks"}, "ars/train"),
        ("mnist_structured/mnist_comparison.sh", {"STAGE": "soft", "SIGMAS": "025"}, "train/gaussian_s025"),
    ],
)
def test_a_last_checkpoint_without_train_done_is_never_certified(tmp_path, script, env, trained):
    """Catches: a script treating an existing last.ckpt as a finished training (fast_certification.sh did:
    last.ckpt is written every epoch, so an unfinished or failed run's checkpoint was certified and its rows
    went into the tables as the model's)."""
    folder = tmp_path / "out" / trained / "checkpoints"
    folder.mkdir(parents=True)
    (folder / "last.ckpt").write_text("")
    result, calls = run_script(tmp_path, script, **env)
    assert result.returncode != 0 and not calls, (result.stderr, calls)
    logs = result.stderr + "".join(p.read_text() for p in (tmp_path / "out").glob("**/*.log"))
    assert f"has not finished training ({folder.parent}/train.done is missing)" in logs


HELPERS = REPO / "scripts" / "run_steps.sh"


def run_helpers(tmp_path: Path, body: str, **env: str) -> tuple[subprocess.CompletedProcess, list]:
    script = tmp_path / "body.sh"
    script.write_text(f"set -euo pipefail\nsource {HELPERS}\n{body}\n")
    return run_script(tmp_path, str(script), **env)


def test_a_failed_training_is_not_marked_done_even_inside_an_and_list(tmp_path):
    """Catches: train_run writing train.done after a failed train.py when called as `train_run a && b` (set -e
    is off inside such a list, so the marker line after the failed command still ran)."""
    out = tmp_path / "out"
    result, calls = run_helpers(
        tmp_path, f'train_run {out}/a x=1 && train_run {out}/b y=2 || echo "failed: $?"', TRAIN_STATUS="3"
    )
    assert result.returncode == 0 and "failed: 3" in result.stdout, result.stderr
    assert calls == [["train.py", "x=1", f"hydra.run.dir={out}/a", "ckpt_path=last"]]
    assert not (out / "a" / "train.done").exists()


def test_finished_trainings_and_certifications_are_skipped_and_rows_archived(tmp_path):
    out = tmp_path / "out"
    body = f"train_run {out}/t x=1\ncertify_run {out}/t {out}/c n=10\n"
    body += f"archive_run {out}/c {tmp_path}/archive/c"
    result, calls = run_helpers(tmp_path, body)
    assert result.returncode == 0, result.stderr
    assert calls == [
        ["train.py", "x=1", f"hydra.run.dir={out}/t", "ckpt_path=last"],
        [
            "certify.py",
            f"checkpoint={out}/t/checkpoints/last.ckpt",
            "n=10",
            f"output_dir={out}/c",
            f"hydra.run.dir={out}/c",
        ],
    ]
    assert (out / "t" / "train.done").is_file()
    assert sorted(os.listdir(tmp_path / "archive" / "c")) == ["certify.tsv", "settings.json", "summary.json"]
    (tmp_path / "record.jsonl").unlink()
    again, calls = run_helpers(tmp_path, body)
    assert again.returncode == 0 and calls == []  # train.done and summary.json: nothing runs again
    assert "is finished" in again.stdout


def test_dry_run_prints_commands_and_runs_nothing(tmp_path):
    out = tmp_path / "out"
    body = f"train_run {out}/t 'a=b c'\ncertify_run {out}/t {out}/c"
    result, calls = run_helpers(tmp_path, body, DRY_RUN="1")
    assert result.returncode == 0 and calls == [] and not out.exists(), result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("+ ")]
    assert lines[0].endswith(f"train.py a=b\\ c hydra.run.dir={out}/t ckpt_path=last")
    assert lines[1].endswith(
        f"certify.py checkpoint={out}/t/checkpoints/last.ckpt output_dir={out}/c hydra.run.dir={out}/c"
    )


def test_the_reproduction_report_is_built_from_archived_rows_at_sigma_one(tmp_path):
    """evidence/mnist_reproduction/mnist_reproduction.sh STAGE=report for the sigma = 1.0 pair. Catches: the
    published comparison's `--sigma 0.${s#0}`, which read the runs' "100" as sigma = 0.100; reports built from
    rows outside the repository (they could not be rebuilt)."""
    runs = ("cohen_mnist_sigma100", "consistency_mnist_sigma100")
    for exp in runs:
        folder = tmp_path / "out" / exp / "certify_n100000"
        folder.mkdir(parents=True)
        for name in ("certify.tsv", "settings.json", "summary.json"):
            (folder / name).write_text(exp)
    env = {"STAGE": "report", "RUNS": " ".join(runs), "SIGMAS": "100", "BUDGETS": "100000"}
    result, calls = run_script(tmp_path, "mnist_reproduction/mnist_reproduction.sh", **env)
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "reports" / "sigma100_n100000"
    archived = [str(folder / "runs" / method) for method in ("cohen", "consistency")]
    assert [(folder / "runs" / m / "certify.tsv").read_text() for m in ("cohen", "consistency")] == list(runs)
    assert calls[0][:4] == ["-m", "rs_lightning.cli.report", *archived] and str(folder) in calls[0]
    published = [call for call in calls if call[2] == "published"]
    assert [call[3] for call in published] == archived
    assert all(call[call.index("--sigma") + 1] == "1.0" for call in published)


def test_certify_run_takes_another_checkpoint_file_of_the_run(tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "a" / "train.done").write_text("")
    result, calls = run_helpers(tmp_path, f"certify_run {out}/a {out}/c n=10", CHECKPOINT="epoch089.ckpt")
    assert result.returncode == 0, result.stderr
    assert calls == [
        [
            "certify.py",
            f"checkpoint={out}/a/checkpoints/epoch089.ckpt",
            "n=10",
            f"output_dir={out}/c",
            f"hydra.run.dir={out}/c",
        ]
    ]


def test_fast_certification_archives_every_run_it_certifies(tmp_path):
    """evidence/fast_certification/fast_certification.sh STAGE=compare and STAGE=headline: the rows of each of
    its five certifications go to $ARCHIVE/<model>/<run>, from which its tables are built. Catches a run
    certified but not archived (its table could not be rebuilt from the repository)."""
    (tmp_path / "out" / "train" / "mnist_lenet_s050" / "checkpoints").mkdir(parents=True)
    (tmp_path / "out" / "train" / "mnist_lenet_s050" / "train.done").write_text("")
    for stage in ("compare", "headline"):
        result, calls = run_script(tmp_path, FAST, STAGE=stage)  # calls: both stages'
        assert result.returncode == 0, result.stderr
    certified = [call for call in calls if call[0] == "certify.py"]
    runs = sorted(p.relative_to(tmp_path / "archive") for p in (tmp_path / "archive").glob("*/*"))
    names = ("ias_bf16", "iss_ad005_bf16", "iss_ad010_bf16", "headline_ias_fp32", "headline_iss_ad005_bf16")
    assert len(certified) == 5 and [str(r) for r in runs] == sorted(f"mnist_lenet_s050/{r}" for r in names)
    assert all((tmp_path / "archive" / r / "certify.tsv").is_file() for r in runs)


def test_the_ars_clutter_report_is_built_from_archived_rows(tmp_path):
    """evidence/ars_clutter/ars_clutter.sh STAGE=report: each run's rows go to $ARCHIVE/<run> and the
    report and the paired CIs read them there, so tests/test_archived_evidence.py can rebuild both from the
    repository. Catches a report built from the rows outside the repository (it used to be)."""
    runs = ("ars", "ars_static", "ars_vanilla")
    for run in runs:
        folder = tmp_path / "out" / run / "certify"
        folder.mkdir(parents=True)
        for name in ("certify.tsv", "settings.json", "summary.json"):
            (folder / name).write_text(run)
        (tmp_path / "out" / run / "train").mkdir()
        (tmp_path / "out" / run / "train" / "train.done").write_text("")  # the masks need finished trainings
    result, calls = run_script(tmp_path, "ars_clutter/ars_clutter.sh", STAGE="report")
    assert result.returncode == 0, result.stderr
    archive = tmp_path / "archive"
    assert [(archive / run / "certify.tsv").read_text() for run in runs] == list(runs)
    report, paired, static = calls[0], calls[1], calls[2]
    assert report[:5] == ["-m", "rs_lightning.cli.report", *(str(archive / run) for run in runs)]
    assert paired[:6] == [
        "-m",
        "rs_lightning.cli.report",
        "paired",
        *(str(archive / r) for r in ("ars", "ars_vanilla", "ars_static")),
    ]
    assert static[3:5] == [str(archive / "ars_static"), str(archive / "ars_vanilla")]
    assert [call[0] for call in calls[3:]] == ["scripts/ars_masks.py"] * 2  # the masks: from checkpoints


def test_denoised_smoothing_stops_on_a_failed_background_training_and_reports_from_archived_rows(tmp_path):
    """evidence/denoised_smoothing/denoised_smoothing.sh: a failed training in a background chain (the
    denoisers, the Gaussian run or the DDPM) fails the script before any certification, and STAGE=report
    archives every run's rows (clean, the three DnCNN stages, Gaussian, the DDPM) under $REPORT and builds the
    report and paired CIs from there. Catches a chain whose failure went unnoticed and a run left out of the
    archived evidence."""
    clean = tmp_path / "out" / "train" / "clean"
    clean.mkdir(parents=True)
    (clean / "train.done").write_text("")
    result, calls = run_script(tmp_path, DENOISED, TRAIN_STATUS="1", SIGMAS="0.25")
    assert result.returncode != 0 and "error: a background job failed" in result.stderr, result.stderr
    assert calls and all(call[0] == "train.py" for call in calls), calls
    assert {"method=diffusion", "method=gaussian"} <= {a for call in calls for a in call}  # both chains ran

    runs = ("clean", "dncnn_mse", "dncnn_stab", "dncnn_clf", "gaussian", "ddpm")
    for run in runs:
        folder = tmp_path / "out" / "certify" / "s025" / run
        folder.mkdir(parents=True)
        for name in ("certify.tsv", "settings.json", "summary.json"):
            (folder / name).write_text(run)
    report = tmp_path / "report"
    (tmp_path / "record.jsonl").unlink()  # the calls of this run only
    result, calls = run_script(tmp_path, DENOISED, STAGE="report", SIGMAS="0.25", REPORT=str(report))
    assert result.returncode == 0, result.stderr
    assert [(report / "s025" / "runs" / run / "certify.tsv").read_text() for run in runs] == list(runs)
    assert calls[0][:2] == ["-m", "rs_lightning.cli.report"]
    assert calls[0][2:8] == [str(report / "s025" / "runs" / run) for run in runs]
    assert calls[1][2] == "paired" and len(calls) == 2
