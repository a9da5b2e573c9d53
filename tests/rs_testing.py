"""Test helpers: compose the real Hydra config tree in-process as the entry points do."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def shared_data_dir() -> Path | None:
    """../shared/data next to the repository (or $RS_SHARED_DATA), if present."""
    candidates = [os.environ.get("RS_SHARED_DATA"), REPO.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def compose_config(name: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose ``conf/<name>.yaml`` as the entry points do (without Hydra's runtime)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=name, overrides=overrides or [])


def train_config(tmp_path: Path, overrides: list[str] | None = None) -> DictConfig:
    """A training config writing into ``tmp_path``, quiet and fast by default."""
    cfg = compose_config(
        "train",
        [
            f"paths.output_dir={tmp_path}",
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            *(overrides or []),
        ],
    )
    return cfg


def certify_config(tmp_path: Path, checkpoint: str | Path, overrides: list[str] | None = None) -> DictConfig:
    cfg = compose_config(
        "certify", [f"checkpoint={checkpoint}", f"output_dir={tmp_path}", *(overrides or [])]
    )
    with open_dict(cfg):
        cfg.device = "cpu"
    return cfg


def run_script(
    script: str, *overrides: str, timeout: float = 120, cwd: Path = REPO
) -> subprocess.CompletedProcess:
    """Run an entry point (``train.py``, ``certify.py``, ``-m rs_lightning.cli.report``) as a user does."""
    command = [sys.executable, *(script.split() if script.startswith("-m ") else [str(REPO / script)])]
    return subprocess.run(
        [*command, *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def assert_one_line_error(done: subprocess.CompletedProcess, *needles: str) -> str:
    """The project's bad-input contract: exit status 2, one stderr line ``error: ...`` holding ``needles``,
    no traceback."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


SMALL = ["n=300", "skip=10", "batch_size=300"]
"""certify.py settings for the digits fixture's checkpoint: 36 test digits, a few seconds."""


def without_time(path) -> list[str]:
    """The TSV's lines without the ``time`` column (the only one that depends on the process)."""
    lines = Path(path).read_text().splitlines()
    drop = lines[0].split("\t").index("time")
    return ["\t".join(f for j, f in enumerate(line.split("\t")) if j != drop) for line in lines]


def write_quadrant_npz(path: Path, train: int, test: int) -> Path:
    """A 3-class ``.npz`` of 16x16 uint8 images whose class is the brightness of one quadrant (learnable in a
    few steps; ARS's and the sigma-override tests' data)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def split(count):
        y = rng.integers(0, 3, count)
        x = rng.integers(0, 60, (count, 16, 16)).astype(np.uint8)
        for i, label in enumerate(y):
            x[i, : 8 * (label > 0) + 8, :8] += np.uint8(150)
        return x, y

    (x_train, y_train), (x_test, y_test) = split(train), split(test)
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path
