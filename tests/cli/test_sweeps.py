"""Hydra multirun sweeps through the launcher plugins (sweeps on a cluster)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from hydra import compose, initialize_config_dir
from rs_testing import CONF, REPO


def test_a_2x2_joblib_sweep_gives_4_runs_each_with_results_and_a_finished_wandb_run(tmp_path):
    """Catches: jobs sharing one output folder (overwritten results), a W&B run left open by a job, and the
    launcher plugin missing from the dependencies."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true"}
    args = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path}",
        "sigma=0.25,0.5",
        "seed=0,1",
        "optim.max_epochs=1",
        "logger=wandb",
        "~callbacks.certification",
        "trainer.enable_progress_bar=false",
    ]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(jobs) == 4
    seen = set()
    for job in jobs:
        checkpoint = torch.load(job / "checkpoints" / "last.ckpt", weights_only=True)
        meta = checkpoint["rs_lightning"]
        seen.add((meta["sigma"], meta["seed"]))
        assert (job / "csv" / "metrics.csv").stat().st_size > 0
        run_id = meta["wandb_run_id"]
        assert list((job / "wandb").glob(f"offline-run-*/run-{run_id}.wandb"))
        log = (job / "wandb" / "debug.log").read_text()
        assert f"finishing run rs-lightning/{run_id}" in log and "got exitcode: 0" in log
    assert seen == {(0.25, 0), (0.25, 1), (0.5, 0), (0.5, 1)}


@pytest.mark.parametrize(
    "launcher, target",
    [
        ("joblib", "JoblibLauncher"),
        ("submitit_local", "LocalLauncher"),
        ("submitit_slurm", "SlurmLauncher"),
        ("slurm_ddp", "SlurmLauncher"),
    ],
)
def test_the_launchers_compose(launcher, target):
    """joblib / submitit_* come from the plugins; slurm_ddp is the project's multi-GPU preset (one task
    per GPU, as Lightning's SLURM environment expects)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[f"hydra/launcher={launcher}", "trainer=ddp", "trainer.devices=4"],
            return_hydra_config=True,
        )
    assert cfg.hydra.launcher._target_.endswith(target)
    if launcher == "slurm_ddp":
        assert cfg.hydra.launcher.tasks_per_node == 4 and cfg.hydra.launcher.gpus_per_node == 4


def docs_block(marker: str) -> str:
    """The fenced bash block of the README or a docs/ page that holds ``marker``, as a user would copy it."""
    text = "".join(p.read_text() for p in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))])
    blocks = [b.split("```", 1)[0] for b in text.split("```bash\n")[1:]]
    (block,) = [b for b in blocks if marker in b]
    return block


def test_the_docs_loop_certifies_every_job_of_a_sweep_and_reports_them(tmp_path):
    """Catches: the "after a sweep, certify each job" loop (docs/scaling.md) failing on the docs' own sweep
    (job folders named ``0_sigma=0.25`` stopped certify.py in Hydra's override grammar at the second ``=``).
    The loop runs as written (only the sweep folder, the interpreter and the budget substituted) over one
    job folder of today's naming and one of the old ``key=value,key=value`` naming."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    sweep = tmp_path / "multirun"
    args = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        f"hydra.sweep.dir={sweep}",
        "sigma=0.25,0.5",
        "seed=0",
        "optim.max_epochs=1",
        "+trainer.limit_train_batches=2",
        "+trainer.limit_val_batches=1",
        "logger=none",
        "~callbacks.certification",
        "trainer.enable_progress_bar=false",
    ]
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert len(jobs) == 2 and not any("=" in job or "," in job for job in jobs), jobs
    assert "_sigma-0.25_" in jobs[0] and "_sigma-0.5_" in jobs[1]
    (sweep / jobs[1]).rename(sweep / "1_seed=0,sigma=0.5")  # a folder from a sweep before the naming changed
    loop = docs_block("for job in multirun/train/DATE/TIME/*/")
    assert "n=100000" in loop and "--out outputs/report/my_sweep" in loop
    loop = loop.replace("multirun/train/DATE/TIME", str(sweep)).replace("python ", f"{sys.executable} ")
    loop = loop.replace("n=100000", "n=100 max=200").replace(
        "outputs/report/my_sweep", str(tmp_path / "report")
    )
    done = subprocess.run(
        ["bash", "-e", "-c", loop], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for job in (jobs[0], "1_seed=0,sigma=0.5"):
        assert (sweep / job / "certify" / "certify.tsv").is_file()
    report = (tmp_path / "report" / "report.md").read_text()
    assert jobs[0] in report and "1_seed=0,sigma=0.5" in report
