"""Certification in parts: shard=i/k into one folder, merging, locks and resume guards."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from rs_testing import REPO, SMALL, certify_config, without_time

from rs_lightning.cli.certify import certify
from rs_lightning.validation import ConfigError


def run_shard(out, checkpoint, shard, extra=()):
    return certify(certify_config(out, checkpoint, [*SMALL, f"shard={shard}", *extra]))


def test_parts_merge_into_the_single_process_file(trained_digits, digits_reference, tmp_path):
    """Catches: a merged file that is not sorted by idx, loses or repeats rows, or differs from a
    single-process run; a summary written before every part is in."""
    ref_dir, ref_summary = digits_reference
    first = run_shard(tmp_path, trained_digits["checkpoint"], "1/3")
    assert first == {"merged": False, "missing": 24, "num_inputs": 36}
    assert not (tmp_path / "certify.tsv").exists() and not (tmp_path / "summary.json").exists()
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    summary = run_shard(tmp_path, trained_digits["checkpoint"], "2/3")
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert not list(tmp_path.glob("certify.shard-*"))
    assert summary["acr"] == ref_summary["acr"] and summary["num_inputs"] == 36


def test_resume_with_another_number_of_parts_certifies_every_index_once(
    trained_digits, digits_reference, tmp_path
):
    """A part killed mid-way (an unfinished last line) and resumed as parts of another k: the indices
    already in any part are skipped, none is certified twice, the merge equals a single-process run."""
    ref_dir, _ = digits_reference
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    part = tmp_path / "certify.shard-0-of-3.tsv"
    with part.open("a") as f:
        f.write("999\t1\t1\t0.3")  # a killed writer's unfinished row
    run_shard(tmp_path, trained_digits["checkpoint"], "0/2")
    run_shard(tmp_path, trained_digits["checkpoint"], "1/2")
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")


def test_concurrent_part_jobs_through_a_hydra_launcher(trained_digits, digits_reference, tmp_path):
    """The documented route: `certify.py -m shard=0/2,1/2 output_dir=…` with a launcher running the jobs
    side by side into one folder (joblib here, submitit_slurm on a cluster)."""
    ref_dir, _ = digits_reference
    out = tmp_path / "run"
    args = [
        sys.executable,
        str(REPO / "certify.py"),
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"checkpoint={trained_digits['checkpoint']}",
        f"output_dir={out}",
        "device=cpu",
        "shard=0/2,1/2",
        *SMALL,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert without_time(out / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert json.loads((out / "summary.json").read_text())["num_inputs"] == 36


@pytest.mark.parametrize("shard", ["3/2", "-1/4", "2", "a/b", "0/0"])
def test_bad_shard_values(tmp_path, shard):
    with pytest.raises(ConfigError, match=r"^shard=.*must be i/k with integers 0 <= i < k"):
        certify(certify_config(tmp_path, tmp_path / "missing.ckpt", [f"shard={shard}"]))


def test_ddp_sim_ranks_give_the_single_process_rows(trained_digits, digits_reference, tmp_path):
    """trainer=ddp_sim: 2 CPU processes split the explicit index list (no sampler padding, so no input
    twice); the merged file equals a single-process run's but for `time`."""
    ref_dir, ref_summary = digits_reference
    summary = certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert summary["acr"] == ref_summary["acr"] and not list(tmp_path.glob("certify.shard-*"))


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
    args = [
        sys.executable,
        str(REPO / "certify.py"),
        f"checkpoint={trained_digits['checkpoint']}",
        f"output_dir={out}",
        "device=cpu",
        "n=100",
        "max=3",
    ]
    done = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "certify.tsv").is_file() and (out / ".hydra").is_dir()
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_sequential_ddp_sim_ranks_give_the_single_process_rows(trained_digits, tmp_path):
    """sampling=sequential on 2 ranks: the rows (each input's looks and stop) equal a single process's."""
    sequential = [*SMALL, "sampling=sequential", "n=2000"]
    certify(certify_config(tmp_path / "one", trained_digits["checkpoint"], sequential))
    certify(certify_config(tmp_path / "ddp", trained_digits["checkpoint"], [*sequential, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "ddp" / "certify.tsv") == without_time(tmp_path / "one" / "certify.tsv")
