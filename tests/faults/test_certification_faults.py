"""Certification under faults: killed runs and killed launchers, concurrent writers, lost or corrupt
settings, torn and repeated rows. Each test names the defect it exists to catch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from rs_testing import REPO, SMALL, assert_one_line_error, certify_config, run_script, without_time

from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main as report_main
from rs_lightning.runs import FINGERPRINT, FolderLock, ResultFileError, RunRecord, read_results
from rs_lightning.validation import ConfigError


def run_shard(out, checkpoint, shard, extra=()):
    return certify(certify_config(out, checkpoint, [*SMALL, f"shard={shard}", *extra]))


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def children(pid: int) -> list[int]:
    found = subprocess.run(["ps", "--ppid", str(pid), "-o", "pid="], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


# ---------------------------------------------------------------- ranks that outlive their launcher
# Once, `certify.py trainer=ddp_sim` killed with kill -9 left both ranks running (parent 1) and
# writing; a resume 3 s later certified the same idx, and the folder ended with overlapping parts.


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_rank_dies_with_its_launcher_even_with_sigint_ignored(tmp_path):
    """Catches: relying on torch's parent-death SIGINT, which a launcher started with `nohup … &` (SIGINT
    ignored, inherited by its ranks) never delivers."""
    rank = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {str(REPO)!r})
        from rs_lightning.certification.ranks import die_with_launcher
        die_with_launcher(os.getppid())
        open({str(tmp_path / "armed")!r}, "w").close()
        time.sleep(120)
    """)
    launcher = textwrap.dedent(f"""
        import signal, subprocess, sys, time
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        subprocess.Popen([sys.executable, "-c", {rank!r}])
        time.sleep(120)
    """)
    job = subprocess.Popen([sys.executable, "-c", launcher])
    deadline = time.time() + 60
    while not (tmp_path / "armed").exists():
        assert time.time() < deadline and job.poll() is None
        time.sleep(0.05)
    (rank_pid,) = children(job.pid)
    job.send_signal(signal.SIGKILL)
    job.wait()
    deadline = time.time() + 5
    while alive(rank_pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(rank_pid), "the rank outlived its launcher"


def test_a_live_rank_keeps_every_other_run_out(trained_digits, tmp_path):
    """Catches: a run (single, part, distributed, merge) that checks only the launcher's lock, so a resume
    starts while ranks of the killed run still write."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import sys, time
            sys.path.insert(0, {str(REPO)!r})
            from rs_lightning.runs import hold_rank_lock
            lock = hold_rank_lock({str(tmp_path)!r})
            print("held", flush=True)
            time.sleep(120)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = "in use by ranks of a distributed certify.py"
        for extra in ([], ["shard=0/2"], ["trainer=ddp_sim"]):
            with pytest.raises(ResultFileError, match=refused):
                certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, *extra]))
        (tmp_path / "settings.json").write_text('{"subset": {"start": 0, "skip": 10, "num_inputs": 36}}')
        assert report_main(["merge", str(tmp_path)]) == 2
    finally:
        holder.kill()
        holder.wait()
    assert not list(tmp_path.glob("certify*.tsv"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "trainer",
    [["trainer=ddp_sim"], ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]],
    ids=["ddp_spawn", "ddp_subprocess"],
)
def test_kill_9_of_the_launcher_then_resume_at_once(trained_digits, digits_reference, tmp_path, trainer):
    """The issue's case, with the launcher started as `nohup … &` starts it (SIGINT ignored): kill -9 the
    launcher mid-run, resume at once. The resume is refused while a rank lives, or runs clean; the folder
    never ends with overlapping parts and its rows equal an uninterrupted run's."""
    ref_dir, _ = digits_reference
    args = [
        sys.executable,
        str(REPO / "certify.py"),
        f"checkpoint={trained_digits['checkpoint']}",
        f"output_dir={tmp_path}",
        "batch_size=20",
        *SMALL[:2],
        *trainer,
    ]
    job = subprocess.Popen(
        args,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    deadline = time.time() + 300
    while sum(p.read_text().count("\n") for p in tmp_path.glob("certify.shard-*.tsv")) < 8:
        assert time.time() < deadline and job.poll() is None
        time.sleep(0.05)
    ranks = children(job.pid)
    job.send_signal(signal.SIGKILL)
    job.wait()
    try:
        certify(certify_config(tmp_path, trained_digits["checkpoint"], SMALL))
    except ResultFileError as refused:
        assert "in use by ranks" in str(refused)
        deadline = time.time() + 10
        while any(alive(p) for p in ranks) and time.time() < deadline:
            time.sleep(0.1)
        certify(certify_config(tmp_path, trained_digits["checkpoint"], SMALL))
    assert not any(alive(p) for p in ranks)
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
    assert not list(tmp_path.glob("certify.shard-*"))


# ---------------------------------------------------------------- protocols mixed in one folder
# Once, with settings.json deleted, a resume at another alpha was accepted and the rows of
# alpha = 0.001 and 0.01 ended in one file, summarized as alpha = 0.01.


def test_resume_without_settings_checks_the_rows_own_n(trained_digits, tmp_path):
    """Catches: a missing settings.json disabling the resume check, so rows at n=300 and n=200 mix."""
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "max=30"]))
    (tmp_path / "settings.json").unlink()
    with pytest.raises(ConfigError, match=r"certify.tsv holds rows with n=300, n0=100 .* this run has n=200"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=200", "skip=10"]))


@pytest.mark.parametrize("alpha", ["0.01", "0.0011"])
def test_resume_without_settings_recovers_alpha_from_the_rows(trained_digits, tmp_path, alpha):
    """Each row's pA_lower is the Clopper–Pearson bound of its nA of n at the alpha it was made at; a resume
    at another alpha (even 0.0011 against 0.001) is refused, naming the alpha the rows were made at."""
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "max=30"]))  # alpha 0.001
    (tmp_path / "settings.json").unlink()
    before = (tmp_path / "certify.tsv").read_text()
    with pytest.raises(ConfigError, match=rf"rows certified at alpha=0\.001 .* this run has alpha={alpha}"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, f"alpha={alpha}"]))
    assert (tmp_path / "certify.tsv").read_text() == before


def test_resume_without_settings_recovers_sigma_from_the_radii(trained_digits, tmp_path):
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "max=30"]))  # sigma 0.25
    (tmp_path / "settings.json").unlink()
    overrides = [*SMALL, "sigma=0.5", "override_sigma=true"]
    expected = r"another sigma, noise or norm.* this run has sigma=0.5, noise=gaussian, norm=l2"
    with pytest.raises(ConfigError, match=expected):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], overrides))


def test_resume_without_settings_recovers_alpha_in_predict_mode(trained_digits, tmp_path):
    """PREDICT rows abstain exactly where p-value > alpha. With n = 4 draws the top-two test's p-value is
    0.125 at best, so every row made at alpha = 0.5 answers, and alpha = 0.001 would abstain on all."""
    predict = ["mode=predict", "n=4", "skip=10", "batch_size=4"]
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*predict, "max=30", "alpha=0.5"]))
    (tmp_path / "settings.json").unlink()
    with pytest.raises(ConfigError, match=r"does not abstain at p-value 0.125 .* this run has alpha"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], [*predict, "alpha=0.001"]))


def test_report_refuses_rows_that_contradict_their_settings(trained_digits, tmp_path, capsys):
    """A folder mixed before this check existed (rows at alpha 0.01 appended under a settings.json of alpha
    0.001) is refused by the report instead of being summarized at one alpha."""
    a, b = tmp_path / "a", tmp_path / "b"
    certify(certify_config(a, trained_digits["checkpoint"], [*SMALL, "max=20"]))
    certify(certify_config(b, trained_digits["checkpoint"], [*SMALL, "start=200", "alpha=0.01"]))
    rows = (b / "certify.tsv").read_text().splitlines()[1:]
    (a / "certify.tsv").write_text((a / "certify.tsv").read_text() + "\n".join(rows) + "\n")
    settings = (a / "settings.json").read_text().replace('"max": 20', '"max": null')
    (a / "settings.json").write_text(settings.replace('"num_inputs": 2', '"num_inputs": 36'))
    assert report_main([str(a), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "rows certified at alpha=0.01" in err and "its settings say alpha=0.001" in err


# ---------------------------------------------------------------- rows copied in from another run
# Copied rows of a Cohen run without their settings.json, then a resume with sampling=iss, exited 0 with rows
# of both samplers in one file (the rows' own n, alpha and radii fit both); so did another seed, precision or
# checkpoint. Every row now carries its run's protocol fingerprint.


def fingerprint_of(folder: Path) -> str:
    (found,) = set(read_results(folder / "certify.tsv")[FINGERPRINT])
    return str(found)


def changed_checkpoint(checkpoint: str, tmp_path: Path) -> str:
    """The checkpoint with one weight moved by 1e-3: another model under the same metadata."""
    saved = torch.load(checkpoint, weights_only=True)
    state = saved["state_dict"]
    name = next(k for k, v in state.items() if v.is_floating_point())
    state[name] = state[name] + 1e-3
    torch.save(saved, tmp_path / "other.ckpt")
    return str(tmp_path / "other.ckpt")


@pytest.mark.parametrize("change", ["sampling=iss", "seed=7", "precision=bf16", "checkpoint"])
def test_copied_rows_of_another_protocol_without_settings_are_refused(
    trained_digits, digits_reference, tmp_path, change
):
    """Catches: a resume into a folder of copied rows (no settings.json) that trusts what the rows imply —
    n, n0, alpha, sigma, all the same here — and appends rows of another sampler, seed, precision or
    checkpoint to them."""
    ref_dir, _ = digits_reference
    folder = tmp_path / "copied"
    folder.mkdir()
    ten_rows = (ref_dir / "certify.tsv").read_text().splitlines()[:11]  # the header and 10 rows
    (folder / "certify.tsv").write_text("\n".join(ten_rows) + "\n")
    before = (folder / "certify.tsv").read_text()
    checkpoint = trained_digits["checkpoint"]
    if change == "checkpoint":
        checkpoint, change = changed_checkpoint(checkpoint, tmp_path), "n=300"
    done = run_script(
        "certify.py", f"checkpoint={checkpoint}", f"output_dir={folder}", "device=cpu", *SMALL, change
    )
    assert_one_line_error(
        done,
        "output_dir=",
        "certify.tsv holds rows of another protocol",
        fingerprint_of(ref_dir),
        "and no settings.json",
        "Choose another output_dir",
    )
    assert (folder / "certify.tsv").read_text() == before and not (folder / "settings.json").exists()


def test_rows_copied_into_a_folder_with_matching_settings_are_refused(trained_digits, tmp_path):
    """Catches: a resume that compares only settings.json, so rows of another seed appended to a folder's
    certify.tsv are kept and summarized with its own."""
    a, b, ckpt = tmp_path / "a", tmp_path / "b", trained_digits["checkpoint"]
    certify(certify_config(a, ckpt, [*SMALL, "max=50"]))
    certify(certify_config(b, ckpt, [*SMALL, "start=50", "max=100", "seed=7"]))
    rows = (b / "certify.tsv").read_text().splitlines()[1:]
    (a / "certify.tsv").write_text((a / "certify.tsv").read_text() + "\n".join(rows) + "\n")
    with pytest.raises(ConfigError, match=rf"{fingerprint_of(b)}\) though settings.json matches") as refused:
        certify(certify_config(a, ckpt, [*SMALL, "max=100"]))
    assert RunRecord.read(a).fingerprint() in str(refused.value)


def test_report_refuses_a_folder_of_mixed_or_foreign_fingerprints(trained_digits, tmp_path, capsys):
    """Catches: the report summarizing rows of two seeds as one run (their rows agree with either
    settings.json), or rows of another run under a folder's settings.json."""
    a, b, ckpt = tmp_path / "a", tmp_path / "b", trained_digits["checkpoint"]
    certify(certify_config(a, ckpt, [*SMALL, "max=20"]))
    certify(certify_config(b, ckpt, [*SMALL, "start=200", "seed=7"]))
    theirs, ours = fingerprint_of(b), fingerprint_of(a)
    rows = (b / "certify.tsv").read_text().splitlines()[1:]
    (a / "certify.tsv").write_text((a / "certify.tsv").read_text() + "\n".join(rows) + "\n")
    settings = (a / "settings.json").read_text().replace('"max": 20', '"max": null')
    (a / "settings.json").write_text(settings.replace('"num_inputs": 2', '"num_inputs": 36'))
    capsys.readouterr()  # the progress bars
    assert report_main([str(a), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.splitlines()) == 1
    assert "holds rows of 2 protocols" in err and theirs in err and ours in err
    (b / "settings.json").write_text((a / "settings.json").read_text())  # b's rows under a's settings
    (b / "summary.json").unlink()
    assert report_main([str(b), "--out", str(tmp_path / "r2")]) == 2
    err = capsys.readouterr().err
    assert f"holds rows of protocol fingerprint {theirs}, but its settings give {ours}" in err


def test_merge_refuses_parts_of_another_protocol(trained_digits, tmp_path, capsys):
    """Catches: `report merge` joining a part certified at another seed (copied in) into one certify.tsv."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_shard(a, trained_digits["checkpoint"], "0/2")
    run_shard(b, trained_digits["checkpoint"], "1/2", ["seed=7"])
    (a / "certify.shard-1-of-2.tsv").write_text((b / "certify.shard-1-of-2.tsv").read_text())
    capsys.readouterr()  # the progress bars
    assert report_main(["merge", str(a)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parts of") and "hold rows of different protocols" in err
    assert len(err.splitlines()) == 1 and not (a / "certify.tsv").exists()


def test_merge_refuses_parts_of_another_protocol_than_the_settings(trained_digits, tmp_path, capsys):
    """Catches: `report merge` that only compares the parts with one another, so a folder whose part was
    replaced by another seed's is merged (or waits for its other part) under its own settings.json."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_shard(a, trained_digits["checkpoint"], "0/2")
    run_shard(b, trained_digits["checkpoint"], "0/2", ["seed=7"])
    part = "certify.shard-0-of-2.tsv"
    (a / part).write_text((b / part).read_text())  # a's only part now holds seed 7's rows
    capsys.readouterr()  # the progress bars
    assert report_main(["merge", str(a)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {part} holds rows of another protocol") and len(err.splitlines()) == 1
    assert RunRecord.read(a).fingerprint() in err and not (a / "certify.tsv").exists()


def test_a_run_from_before_the_fingerprint_resumes_in_its_format(trained_digits, digits_reference, tmp_path):
    """Catches: rows without the ``protocol`` and ``flagged`` columns (an earlier version's) refused on
    resume, appended to with the columns, or finished by parts in the new format that no longer merge with
    them; their rows are still checked for what they record (another n is refused)."""
    ref_dir, _ = digits_reference
    ckpt = trained_digits["checkpoint"]
    certify(certify_config(tmp_path, ckpt, [*SMALL, "max=150"]))
    table = tmp_path / "certify.tsv"
    table.write_text("".join(line.rsplit("\t", 2)[0] + "\n" for line in table.read_text().splitlines()))
    (tmp_path / "settings.json").unlink()
    with pytest.raises(ConfigError, match=r"certify.tsv holds rows with n=300, n0=100 .* this run has n=200"):
        certify(certify_config(tmp_path, ckpt, ["n=200", "skip=10"]))
    run_shard(tmp_path, ckpt, "0/2")
    run_shard(tmp_path, ckpt, "1/2")
    assert not list(tmp_path.glob("certify.shard-*"))
    reference = [line.rsplit("\t", 2)[0] for line in without_time(ref_dir / "certify.tsv")]
    assert without_time(table) == reference


# ---------------------------------------------------------------- concurrent writers, killed runs, merges


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


def test_merge_names_missing_and_overlapping_indices(trained_digits, tmp_path, capsys):
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    assert report_main(["merge", str(tmp_path)]) == 2
    assert "24 of 36 inputs are in no part yet (idx [10, 20, 40" in capsys.readouterr().err
    part = (tmp_path / "certify.shard-0-of-3.tsv").read_text().splitlines()
    (tmp_path / "certify.shard-1-of-3.tsv").write_text(part[0] + "\n" + part[1] + "\n")  # idx 0 again
    assert report_main(["merge", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parts of") and "idx [0]" in err


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


def test_a_killed_run_resumes_with_another_world_size(trained_digits, digits_reference, tmp_path):
    """Rows of a killed 3-way run (one part done, one with an unfinished line) are kept; 2 DDP ranks
    certify only the rest; every index ends up exactly once."""
    ref_dir, _ = digits_reference
    run_shard(tmp_path, trained_digits["checkpoint"], "0/3")
    with (tmp_path / "certify.shard-1-of-3.tsv").open("w") as f:
        f.write((tmp_path / "certify.shard-0-of-3.tsv").read_text().splitlines()[0] + "\n1\t2\t")
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_on_two_ranks(trained_digits, digits_reference, tmp_path):
    """A single-process run killed with SIGKILL mid-way (possibly mid-row) resumes as 2 DDP ranks: every
    index once, rows equal to the uninterrupted run's."""
    import signal
    import time

    ref_dir, _ = digits_reference
    args = [
        sys.executable,
        str(REPO / "certify.py"),
        f"checkpoint={trained_digits['checkpoint']}",
        f"output_dir={tmp_path}",
        "device=cpu",
        "batch_size=20",
        *SMALL[:2],
    ]
    job = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    table, deadline = tmp_path / "certify.tsv", time.time() + 240
    while not (table.exists() and table.read_text().count("\n") >= 6):
        assert time.time() < deadline and job.poll() is None
        time.sleep(0.05)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    certify(certify_config(tmp_path, trained_digits["checkpoint"], [*SMALL, "trainer=ddp_sim"]))
    assert without_time(tmp_path / "certify.tsv") == without_time(ref_dir / "certify.tsv")
