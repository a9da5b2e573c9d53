"""Certification in parts (issue 10): shard=i/k into one folder, merging, locks and resume guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rs_testing import REPO, certify_config

from rs_lightning.analysis.results import FolderLock, ResultFileError
from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main as report_main
from rs_lightning.validation import ConfigError

SMALL = ["n=300", "skip=10", "batch_size=300"]  # 36 digits, a few seconds


def without_time(path) -> list[str]:
    """The TSV's lines without the ``time`` column (the only one that depends on the process)."""
    lines = path.read_text().splitlines()
    drop = lines[0].split("\t").index("time")
    return ["\t".join(f for j, f in enumerate(line.split("\t")) if j != drop) for line in lines]


@pytest.fixture(scope="module")
def reference(trained_digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("single")
    summary = certify(certify_config(out, trained_digits["checkpoint"], SMALL))
    return out, summary


def run_shard(out, checkpoint, shard, extra=()):
    return certify(certify_config(out, checkpoint, [*SMALL, f"shard={shard}", *extra]))


def test_parts_merge_into_the_single_process_file(trained_digits, reference, tmp_path):
    """Catches: a merged file that is not sorted by idx, loses or repeats rows, or differs from a
    single-process run; a summary written before every part is in."""
    ref_dir, ref_summary = reference
    first = run_shard(tmp_path, trained_digits["checkpoint"], "1/3")
    assert first == {"merged": False, "missing": 24, "num_inputs": 36}
    assert not (tmp_path / "certify.tsv").exists() and not (tmp_path / "summary.json").exists()
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    summary = run_shard(tmp_path, trained_digits["checkpoint"], "2/3")
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert not list(tmp_path.glob("certify.shard-*"))
    assert summary["acr"] == ref_summary["acr"] and summary["num_inputs"] == 36


def test_resume_with_another_number_of_parts_certifies_every_index_once(trained_digits, reference, tmp_path):
    """A part killed mid-way (an unfinished last line) and resumed as parts of another k: the indices
    already in any part are skipped, none is certified twice, the merge equals a single-process run."""
    ref_dir, _ = reference
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    part = tmp_path / "certify.shard-0-of-3.tsv"
    with part.open("a") as f:
        f.write("999\t1\t1\t0.3")  # a killed writer's unfinished row
    run_shard(tmp_path, trained_digits["checkpoint"], "0/2")
    run_shard(tmp_path, trained_digits["checkpoint"], "1/2")
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")


def test_concurrent_part_jobs_through_a_hydra_launcher(trained_digits, reference, tmp_path):
    """The documented route: `certify.py -m shard=0/2,1/2 output_dir=…` with a launcher running the jobs
    side by side into one folder (joblib here, submitit_slurm on a cluster)."""
    ref_dir, _ = reference
    out = tmp_path / "run"
    args = [
        sys.executable, str(REPO / "certify.py"), "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}", f"checkpoint={trained_digits['checkpoint']}",
        f"output_dir={out}", "device=cpu", "shard=0/2,1/2", *SMALL,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert without_time(out / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert json.loads((out / "summary.json").read_text())["num_inputs"] == 36


def test_a_second_writer_is_refused_while_the_first_runs(trained_digits, tmp_path):
    """Catches: two certify.py runs into one folder both exiting 0 with every index written twice."""
    with FolderLock(tmp_path, shared=False):  # an unsharded run in progress
        with pytest.raises(ResultFileError, match="in use by another running certify.py"):
            certify(certify_config(tmp_path, trained_digits["checkpoint"], SMALL))
        with pytest.raises(ResultFileError, match="in use by another running certify.py"):
            run_shard(tmp_path, trained_digits["checkpoint"], "0/2")
    # a part in progress: other parts may run beside it, an unsharded run may not
    with FolderLock(tmp_path, shared=True), pytest.raises(ResultFileError, match="in use"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], SMALL))
    assert not (tmp_path / "certify.tsv").exists()


@pytest.mark.parametrize("shard", ["3/2", "-1/4", "2", "a/b", "0/0"])
def test_bad_shard_values(tmp_path, shard):
    with pytest.raises(ConfigError, match=r"^shard=.*must be i/k with integers 0 <= i < k"):
        certify(certify_config(tmp_path, tmp_path / "missing.ckpt", [f"shard={shard}"]))


def test_merge_names_missing_and_overlapping_indices(trained_digits, tmp_path, capsys):
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    assert report_main(["merge", str(tmp_path)]) == 2
    assert "24 of 36 inputs are in no part yet (idx [10, 20, 40" in capsys.readouterr().err
    part = (tmp_path / "certify.shard-0-of-3.tsv").read_text().splitlines()
    (tmp_path / "certify.shard-1-of-3.tsv").write_text(part[0] + "\n" + part[1] + "\n")  # idx 0 again
    assert report_main(["merge", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parts of") and "idx [0]" in err


def test_resume_without_settings_checks_the_rows_own_n(trained_digits, tmp_path):
    """Catches: a missing settings.json disabling the resume check, so rows at n=300 and n=200 mix."""
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "max=30"]))
    (tmp_path / "settings.json").unlink()
    with pytest.raises(ConfigError, match=r"certify.tsv holds rows with n=300, n0=100 .* this run has n=200"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=200", "skip=10"]))


def test_corrupt_settings_json_is_one_line(trained_digits, tmp_path):
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "max=30"]))
    (tmp_path / "settings.json").write_text("")
    with pytest.raises(ResultFileError, match=r"settings.json is unreadable"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], SMALL))


def test_report_refuses_duplicate_rows_and_a_bad_sigma(trained_digits, tmp_path, capsys):
    run = tmp_path / "run"
    certify(certify_config(run, trained_digits["checkpoint"], [*SMALL, "max=30"]))
    lines = (run / "certify.tsv").read_text().splitlines()
    (run / "certify.tsv").write_text("\n".join([*lines, lines[1]]) + "\n")
    assert report_main([str(run), "--out", str(tmp_path / "r")]) == 2
    assert "holds idx [0] more than once" in capsys.readouterr().err
    assert report_main([str(run), "--sigma", "-1", "--out", str(tmp_path / "r2")]) == 2
    assert "--sigma=-1.0 is invalid" in capsys.readouterr().err


def test_ddp_sim_ranks_give_the_single_process_rows(trained_digits, reference, tmp_path):
    """trainer=ddp_sim: 2 CPU processes split the explicit index list (no sampler padding, so no input
    twice); the merged file equals a single-process run's but for `time`."""
    ref_dir, ref_summary = reference
    summary = certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert summary["acr"] == ref_summary["acr"] and not list(tmp_path.glob("certify.shard-*"))


def test_a_killed_run_resumes_with_another_world_size(trained_digits, reference, tmp_path):
    """Rows of a killed 3-way run (one part done, one with an unfinished line) are kept; 2 DDP ranks
    certify only the rest; every index ends up exactly once."""
    ref_dir, _ = reference
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    with (tmp_path / "certify.shard-1-of-3.tsv").open("w") as f:
        f.write((tmp_path / "certify.shard-0-of-3.tsv").read_text().splitlines()[0] + "\n1\t2\t")
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")


def test_distributed_certification_bad_input(trained_digits, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="ddp_sim"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp"]))
    with pytest.raises(ConfigError, match=r"^shard='0/2' is invalid: shard must be null with trainer="):
        certify(
            certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim", "shard=0/2"])
        )


def test_output_dir_alone_writes_no_second_folder(trained_digits, tmp_path):
    """Catches: `output_dir=X` still making Hydra write a run folder under ./outputs."""
    out = tmp_path / "run"
    args = [sys.executable, str(REPO / "certify.py"), f"checkpoint={trained_digits['checkpoint']}",
            f"output_dir={out}", "device=cpu", "n=100", "max=3"]  # fmt: skip
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "certify.tsv").is_file() and (out / ".hydra").is_dir()
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_on_two_ranks(trained_digits, reference, tmp_path):
    """A single-process run killed with SIGKILL mid-way (possibly mid-row) resumes as 2 DDP ranks: every
    index once, rows equal to the uninterrupted run's."""
    import signal
    import time

    ref_dir, _ = reference
    args = [sys.executable, str(REPO / "certify.py"), f"checkpoint={trained_digits['checkpoint']}",
            f"output_dir={tmp_path}", "device=cpu", "batch_size=20", *SMALL[:2]]  # fmt: skip
    job = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    table, deadline = tmp_path / "certify.tsv", time.time() + 240
    while not (table.exists() and table.read_text().count("\n") >= 6):
        assert time.time() < deadline and job.poll() is None
        time.sleep(0.05)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
