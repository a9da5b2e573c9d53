"""SIGINT and SIGTERM sent to a run as a user or a cluster sends them: to the process (for a DDP run, the
launcher alone) or to its whole process group (a terminal's Ctrl-C, ``kill -- -PGID``), in training and in
certification, in one process and under ``trainer=ddp_sim``. Each run must end with the signal's exit status
(130, 143), write what it wrote once and without a traceback or a leaked resource, and resume to exactly
what an uninterrupted run gives. The in-process cases (a signal at a chosen step) are in
test_training_faults.py."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rs_testing import REPO, certify_config

from rs_lightning.cli.certify import certify
from rs_lightning.loggers import trained_batches

TRAIN = [
    "~callbacks.certification",
    "logger=csv",
    "trainer.enable_progress_bar=false",
    "data.batch_size=8",
    "optim.max_epochs=3",
]
CERTIFY = ["n=1000", "skip=4", "batch_size=500", "device=cpu"]  # 90 digits, about 5 s in one process
DIRTY = ("Traceback", "leaked semaphore", "Terminating process")


def _terminal_sigint() -> None:
    """A terminal's Ctrl-C reaches a foreground job; pytest run as a background job passes 'ignored' on."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(script: str, log: Path, *args: str) -> subprocess.Popen:
    """``script`` in a process group of its own (so the test can signal the group), output in ``log``."""
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, str(REPO / script), *args],
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_terminal_sigint,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )


def wait_until(done, job: subprocess.Popen, log: Path, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while not done():
        assert job.poll() is None, f"ended early: {log.read_text()[-3000:]}"
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def send(job: subprocess.Popen, target: str, signum: int) -> None:
    if target == "group":
        os.killpg(job.pid, signum)
    else:
        job.send_signal(signum)


def assert_clean(log: Path) -> str:
    text = log.read_text()
    for dirt in DIRTY:
        assert dirt not in text, text[-3000:]
    return text


# ------------------------------------------------------------------------------------------ training
def loop_state(run: Path) -> tuple[tuple[int, int], list[tuple[str, str]]]:
    """The final checkpoint's step counts and every (epoch, step) row of the CSV log."""
    import csv

    checkpoint = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    with open(run / "csv" / "metrics.csv", newline="") as f:
        rows = [(r["epoch"], r["step"]) for r in csv.DictReader(f)]
    return (checkpoint["global_step"], trained_batches(checkpoint)), rows


@pytest.fixture(scope="module")
def straight_ddp_training(tmp_path_factory) -> tuple:
    run = tmp_path_factory.mktemp("straight") / "run"
    job = start("train.py", Path(f"{run}.log"), f"hydra.run.dir={run}", "trainer=ddp_sim", *TRAIN)
    assert job.wait(timeout=600) == 0, Path(f"{run}.log").read_text()[-3000:]
    return loop_state(run)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["launcher", "group"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_every_ddp_rank_at_one_step_and_the_resume_is_exact(
    tmp_path, straight_ddp_training, target, signum
):
    """Catches (trainer=ddp_sim, whose launcher only waits for its spawned ranks): SIGINT to the launcher
    printing "attempting graceful shutdown" while the ranks trained to the end and exited 1; SIGTERM to it
    exiting 143 without the interrupt checkpoint and leaking a semaphore; ranks that stop at different steps
    (a deadlock) or write the checkpoint twice; and a resume that repeats or skips steps or log rows."""
    run, log = tmp_path / "run", tmp_path / "run.log"
    job = start("train.py", log, f"hydra.run.dir={run}", "trainer=ddp_sim", *TRAIN)
    wait_until(lambda: (run / "checkpoints" / "epoch000.ckpt").exists(), job, log)
    time.sleep(0.5)  # into epoch 1 (90 steps of 8 digits a rank)
    send(job, target, signum)
    assert job.wait(timeout=120) == 128 + signum, log.read_text()[-3000:]
    assert assert_clean(log).count("wrote ") == 1
    stopped_at = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["global_step"]
    assert 90 <= stopped_at < 270
    resumed = start(
        "train.py",
        tmp_path / "resumed.log",
        f"hydra.run.dir={run}",
        "trainer=ddp_sim",
        *TRAIN,
        "ckpt_path=last",
    )
    assert resumed.wait(timeout=600) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    assert loop_state(run) == straight_ddp_training


@pytest.mark.slow
def test_ctrl_c_with_dataloader_workers_stops_at_the_step_end_and_resumes_exactly(tmp_path):
    """A terminal's Ctrl-C reaches the DataLoader workers too: they ignore it (catches workers that died at
    once, so the step's end, where the checkpoint is written, found no data, or a stop that had to be
    immediate and repeated part of a step on resume)."""
    common = [*TRAIN, "data.num_workers=2"]
    run, log = tmp_path / "run", tmp_path / "run.log"
    job = start("train.py", log, f"hydra.run.dir={run}", *common)
    wait_until(lambda: (run / "checkpoints" / "epoch000.ckpt").exists(), job, log)
    time.sleep(0.5)
    send(job, "group", signal.SIGINT)
    assert job.wait(timeout=120) == 130, log.read_text()[-3000:]
    assert assert_clean(log).count("wrote ") == 1
    resumed = start("train.py", tmp_path / "resumed.log", f"hydra.run.dir={run}", *common, "ckpt_path=last")
    straight = start("train.py", tmp_path / "straight.log", f"hydra.run.dir={tmp_path / 'straight'}", *common)
    assert resumed.wait(timeout=600) == 0 and straight.wait(timeout=600) == 0
    assert loop_state(run) == loop_state(tmp_path / "straight")


# ------------------------------------------------------------------------------------- certification
def rows_without_time(folder: Path) -> list[list[str]]:
    lines = [line.split("\t") for line in (folder / "certify.tsv").read_text().splitlines()]
    drop = lines[0].index("time")
    return [line[:drop] + line[drop + 1 :] for line in lines]


def rows_written(folder: Path) -> int:
    return sum(max(0, p.read_text().count("\n") - 1) for p in folder.glob("certify*.tsv"))


@pytest.fixture(scope="module")
def straight_certification(trained_digits, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight_certify")
    certify(certify_config(out, trained_digits["checkpoint"], CERTIFY))
    return out


def interrupt_and_resume(checkpoint, out: Path, target: str, signum: int, *extra: str) -> str:
    """certify.py stopped by ``signum`` after 10 rows, then the resume command it printed; its output."""
    log = out.with_suffix(".log")
    job = start("certify.py", log, f"checkpoint={checkpoint}", f"output_dir={out}", *CERTIFY, *extra)
    wait_until(lambda: rows_written(out) >= 10, job, log)
    send(job, target, signum)
    assert job.wait(timeout=120) == 128 + signum, log.read_text()[-3000:]
    text = assert_clean(log)
    stopped = [line for line in text.splitlines() if "inputs certified in" in line]
    assert len(stopped) == 1 and stopped[0].startswith(f"{signal.Signals(signum).name}: "), text[-3000:]
    command = shlex.split(stopped[0].split("resume with: ", 1)[1])
    assert command[:2] == ["python", "certify.py"] and f"output_dir={out}" in command
    resumed = subprocess.run(
        [sys.executable, str(REPO / "certify.py"), *command[2:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return stopped[0]


def test_ctrl_c_of_certify_prints_one_line_with_the_resume_command(
    trained_digits, straight_certification, tmp_path
):
    """Catches: Ctrl-C of certify.py ending in a 30-line KeyboardInterrupt traceback (from the writer's
    flush), exit status 1, and no word on how to go on; and a resume that loses or repeats a row."""
    line = interrupt_and_resume(trained_digits["checkpoint"], tmp_path / "out", "process", signal.SIGINT)
    assert " of 90 inputs certified in " in line
    assert rows_without_time(tmp_path / "out") == rows_without_time(straight_certification)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["process", "group"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_every_certifying_rank_and_the_resume_is_exact(
    trained_digits, straight_certification, tmp_path, target, signum
):
    """Catches (certify.py trainer=ddp_sim): a launcher that dies alone or waits while its ranks certify on,
    ranks that outlive the run (a resume is then refused while they hold the folder), a traceback or a
    leaked semaphore, and rows lost or repeated on resume."""
    out = tmp_path / "out"
    interrupt_and_resume(trained_digits["checkpoint"], out, target, signum, "trainer=ddp_sim")
    assert rows_without_time(out) == rows_without_time(straight_certification)
    assert not list(out.glob("certify.shard-*"))
