"""scripts/reproduce.sh: the commands of a cell (DRY_RUN=1), one-line refusals before any work, resumption
markers, the GPU-hours estimate, and (slow) a tiny end-to-end run on MNIST."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rs_testing import REPO, shared_data_dir

from rs_lightning.analysis import published_numbers as pn

SCRIPT = REPO / "scripts" / "reproduce.sh"
SCRIPT_ENV = (
    "OUT",
    "PY",
    "DATA_OVERRIDES",
    "EXTRA",
    "CERTIFY_EXTRA",
    "REPORT_EXTRA",
    "SOFT_LABELS",
    "PRETRAIN_OUT",
    "PRETRAIN_EXTRA",
    "SOFT_LABELS_EXTRA",
    "DRY_RUN",
    "GPU_JSON",
)
PROTOCOL = [
    "n0=100",
    "n=100000",
    "alpha=0.001",
    "start=0",
    "skip=1",
    "max=10000",
    "noise=gaussian",
]  # the papers'


def run(*args: str, script: Path = SCRIPT, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in SCRIPT_ENV}
    environ |= {"PY": sys.executable, "OMP_NUM_THREADS": "1"} | env
    return subprocess.run(
        ["bash", str(script), *args], capture_output=True, text=True, env=environ, timeout=120
    )


def commands(result: subprocess.CompletedProcess) -> list[list[str]]:
    """The printed commands ("+ ..." lines), split as the shell would."""
    assert result.returncode == 0, result.stderr
    return [shlex.split(line[2:]) for line in result.stdout.splitlines() if line.startswith("+ ")]


def test_dry_run_of_a_mnist_cell(tmp_path):
    out = tmp_path / "cell"
    result = run(
        "mnist",
        "0.25",
        "cohen",
        DRY_RUN="1",
        OUT=str(out),
        DATA_OVERRIDES="data=npz data.path=/data/mnist.npz",
        EXTRA="trainer=gpu seed=3",
    )
    train, certify, report = commands(result)
    assert train == [
        sys.executable,
        "train.py",
        "experiment=cohen_mnist_sigma025",
        "data=npz",
        "data.path=/data/mnist.npz",
        "trainer=gpu",
        "seed=3",
        f"hydra.run.dir={out}/train",
        "ckpt_path=last",
    ]
    assert certify == [
        sys.executable,
        "certify.py",
        f"checkpoint={out}/train/checkpoints/last.ckpt",
        *PROTOCOL,
        f"output_dir={out}/certify",
    ]
    assert report == [
        sys.executable,
        "-m",
        "rs_lightning.cli.report",
        "published",
        f"{out}/certify",
        "--dataset",
        "mnist",
        "--method",
        "cohen",
        "--sigma",
        "0.25",
        "--out",
        f"{out}/report",
        "--overwrite",
    ]
    assert "published: Jeong & Shin 2020 MNIST table (released logs" in result.stdout
    assert not out.exists()  # nothing ran


def test_dry_run_of_a_cifar10_cell_with_defaults_and_certify_extras():
    result = run("cifar10", "1", "acr_gaming", DRY_RUN="1", CERTIFY_EXTRA="batch_size=4000")
    train, certify, report = commands(result)
    out = "outputs/reproduce/cifar10/acr_gaming_s1.0"
    assert train[1:] == [
        "train.py",
        "experiment=acr_gaming_cifar10_sigma100",
        f"hydra.run.dir={out}/train",
        "ckpt_path=last",
    ]
    assert certify[2:] == [
        f"checkpoint={out}/train/checkpoints/last.ckpt",
        *PROTOCOL,
        "batch_size=4000",
        f"output_dir={out}/certify",
    ]
    assert report[4:] == [
        f"{out}/certify",
        "--dataset",
        "cifar10",
        "--method",
        "acr_gaming",
        "--sigma",
        "1.0",
        "--out",
        f"{out}/report",
        "--overwrite",
    ]
    assert "Sun et al. 2025 Table 2" in result.stdout
    assert "CERTIFY_EXTRA=batch_size=4000 may change the protocol" in result.stderr


def test_dry_run_of_catrs_makes_and_passes_the_soft_labels(tmp_path):
    out = tmp_path / "cifar10" / "catrs_s0.5"
    result = run("cifar10", ".5", "catrs", DRY_RUN="1", OUT=str(out), PRETRAIN_EXTRA="trainer=gpu")
    pretrain, soft, train, certify, _ = commands(result)
    pre = tmp_path / "cifar10" / "catrs_pretrain"
    assert pretrain[1:] == [
        "train.py",
        "experiment=cohen_cifar10_sigma025_catrs_pretrain",
        "trainer=gpu",
        f"hydra.run.dir={pre}/train",
        "ckpt_path=last",
    ]
    assert soft[1:] == [
        "soft_labels.py",
        f"checkpoint={pre}/train/checkpoints/last.ckpt",
        f"output={pre}/soft_labels.npy",
        f"hydra.run.dir={pre}/soft_labels",
    ]
    assert train[1:3] == ["train.py", "experiment=catrs_cifar10_sigma050"]
    assert train[3] == f"method.soft_labels={pre}/soft_labels.npy"
    assert certify[3:10] == PROTOCOL


def test_a_rerun_skips_finished_steps(tmp_path):
    """A finished training (its train.done marker) and existing soft labels are not redone; certify.py
    and the report always run (certify.py skips the rows it has)."""
    out = tmp_path / "mnist" / "catrs_s1.0"
    (out / "train").mkdir(parents=True)
    (out / "train" / "train.done").write_text("done\n")
    labels = tmp_path / "labels.npy"
    labels.write_bytes(b"")
    result = run("mnist", "1.0", "catrs", DRY_RUN="1", OUT=str(out), SOFT_LABELS=str(labels))
    steps = commands(result)
    assert [c[1] for c in steps] == ["certify.py", "-m"]
    assert f"# training in {out}/train is finished" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("imagenet", "0.5", "cohen"), "error: dataset='imagenet' is invalid: choose one of cifar10, mnist"),
        (("cifar10", "0.12", "cohen"), "error: sigma='0.12' is invalid: choose one of 0.25, 0.5, 1.0"),
        (
            ("cifar10", "0.5", "gaussian"),
            "error: method='gaussian' is invalid: choose one of cohen, "
            "smoothadv, macer, consistency, smoothmix, catrs, acr_gaming",
        ),
        (
            ("mnist", "0.5", "smoothmix"),
            "error: method='smoothmix' has no published number for dataset=mnist "
            "sigma=0.5: choose one of cohen, smoothadv, macer, consistency, catrs",
        ),
        (
            ("cifar10", "0.5"),
            "error: expected 3 arguments, got 2; usage: scripts/reproduce.sh DATASET SIGMA "
            "METHOD (DATASET: cifar10|mnist; SIGMA: 0.25|0.5|1.0; METHOD: cohen|smoothadv|macer|consistency|"
            "smoothmix|catrs|acr_gaming)",
        ),
    ],
)
def test_bad_arguments_are_refused_in_one_line(tmp_path, args, message):
    result = run(*args, OUT=str(tmp_path / "out"))
    assert result.returncode == 2
    assert result.stderr == message + "\n" and result.stdout == ""
    assert not (tmp_path / "out").exists()


@pytest.fixture
def bare_checkout(tmp_path) -> Path:
    """The script (and the helpers it sources) in a folder with an empty conf/experiment (the package is
    imported from the venv)."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    for name in ("reproduce.sh", "run_steps.sh"):
        shutil.copy(SCRIPT.parent / name, tmp_path / "scripts" / name)
    return tmp_path


def test_a_missing_experiment_file_is_refused(bare_checkout):
    result = run("cifar10", "0.5", "smoothmix", script=bare_checkout / "scripts" / "reproduce.sh")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "error: experiment=smoothmix_cifar10_sigma050 does not exist (no conf/experiment/"
        "smoothmix_cifar10_sigma050.yaml for dataset=cifar10 sigma=0.5 method=smoothmix)\n"
    )


def test_catrs_without_its_pretrain_experiment_is_refused(bare_checkout):
    (bare_checkout / "conf" / "experiment" / "catrs_mnist_sigma050.yaml").write_text("# @package _global_\n")
    result = run("mnist", "0.5", "catrs", script=bare_checkout / "scripts" / "reproduce.sh")
    assert result.returncode == 2 and result.stdout == "" and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: experiment=cohen_mnist_sigma025_catrs_pretrain (CAT-RS's soft-label"
    )
    assert "pass SOFT_LABELS=FILE.npy" in result.stderr


def test_estimate_prints_a_row_per_method_and_dataset_and_its_anchors():
    result = run("--estimate")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    rows = {
        tuple(c.strip() for c in line.strip("|").split("|")[:2]): line
        for line in lines
        if line.startswith(("| cifar10 |", "| mnist |"))
    }
    assert set(rows) == {(d, m) for d, m, _ in pn.PUBLISHED}
    cells = [c.strip() for c in rows["cifar10", "cohen"].strip("|").split("|")]
    assert cells[2:5] == ["90", "1.0", "1.00"]
    assert float(cells[6]) == pytest.approx(10_000 * 15.5 / 3600, abs=0.05)  # 10,000 images x 15.5 s
    assert float(cells[5]) == pytest.approx(90 * 31.4 / 3600, abs=0.006)  # 90 epochs x 31.4 s (P100)
    smoothadv = [c.strip() for c in rows["cifar10", "smoothadv"].strip("|").split("|")]
    assert smoothadv[3] == "44.0 / 22.0 / 22.0"  # m (T + 1): m = 4, 2, 2 and T = 10 at sigma 0.25, 0.5, 1.0
    assert any(line.startswith("CAT-RS pretrain, cifar10") for line in lines)
    assert "Gaussian ResNet-110 CIFAR-10 epoch 31.4 s (1 P100, MACER README)" in result.stdout


@pytest.mark.slow
def test_tiny_end_to_end_run_on_mnist(tmp_path):
    """Train 2 batches, certify 10 images at n = 100, and compare (protocol difference allowed and stated)."""
    data = shared_data_dir()
    if data is None or not (data / "mnist.npz").is_file():
        pytest.skip("no ../shared/data/mnist.npz")
    out = tmp_path / "mnist" / "cohen_s0.5"
    tiny = (
        "optim.max_epochs=1 +trainer.limit_train_batches=2 +trainer.limit_val_batches=1 "
        "callbacks.certification=null trainer.enable_progress_bar=false"
    )
    env = dict(
        OUT=str(out),
        DATA_OVERRIDES=f"data=npz data.path={data / 'mnist.npz'}",
        EXTRA=tiny,
        CERTIFY_EXTRA="n=100 max=10",
        REPORT_EXTRA="--allow-protocol-difference",
    )
    result = run("mnist", "0.5", "cohen", **env)
    assert result.returncode == 0, result.stderr[-3000:]
    text = (out / "report" / "published.md").read_text()
    assert "- **n differs**: ours 100, published 100000" in text
    assert (out / "train" / "train.done").is_file()
    again = run("mnist", "0.5", "cohen", **env)
    assert again.returncode == 0 and "is finished" in again.stdout
