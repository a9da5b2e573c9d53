"""A new dataset is one file in rs_lightning/data/ and one config in conf/data/ (docs/layout.md).

The test copies the package, the configs and the two entry points into a temporary folder, adds exactly those
two files there, trains on the new data module for one epoch and certifies the checkpoint: train.py accepts it
(it must be registered, or certify.py could not rebuild it) and certify.py rebuilds it from the checkpoint's
config. Catches a registry that is a list someone must remember to extend.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from rs_testing import REPO

from rs_lightning.runs import read_results

DATASET = '''"""Stripes: 8x8 images of a horizontal or a vertical bar (a dataset for the layout test)."""

from typing import Any

import numpy as np

from rs_lightning.data.arrays import ArrayDataset
from rs_lightning.data.base import RSDataModule


class StripesDataModule(RSDataModule):
    name = "stripes"

    def __init__(self, size: int = 64, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = int(size)
        self.num_classes, self.class_names, self.input_shape = 2, ["horizontal", "vertical"], (1, 8, 8)

    def _load(self):
        labels = np.arange(self.size) % 2
        images = np.zeros((self.size, 1, 8, 8), dtype=np.uint8)
        for i, label in enumerate(labels):
            row = i % 8
            if label:
                images[i, 0, :, row] = 255
            else:
                images[i, 0, row, :] = 255
        return {"train": ArrayDataset(images, labels), "test": ArrayDataset(images, labels)}
'''
CONFIG = """_target_: rs_lightning.data.stripes.StripesDataModule
size: 64
batch_size: 32
num_workers: 0
"""


def test_a_dataset_is_one_file_and_one_config(tmp_path):
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("rs_lightning", "conf"):
        shutil.copytree(REPO / folder, repo / folder, ignore=ignore)
    for script in ("train.py", "certify.py"):
        shutil.copy(REPO / script, repo / script)
    (repo / "rs_lightning" / "data" / "stripes.py").write_text(DATASET)
    (repo / "conf" / "data" / "stripes.yaml").write_text(CONFIG)

    def run(script: str, *overrides: str) -> None:
        command = [sys.executable, script, *overrides]
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    train = tmp_path / "train"
    recipe = ["optim=digits", "optim.max_epochs=1", "~callbacks.certification", "logger=csv"]
    run("train.py", "data=stripes", *recipe, "trainer.enable_progress_bar=false", f"hydra.run.dir={train}")
    out = tmp_path / "certify"
    checkpoint = train / "checkpoints" / "last.ckpt"
    run(
        "certify.py",
        f"checkpoint={checkpoint}",
        "n=100",
        "skip=16",
        f"hydra.run.dir={out}",
        f"output_dir={out}",
    )
    rows = read_results(out / "certify.tsv")
    assert rows["idx"].size == 4 and set(rows["label"]) <= {0, 1}
    assert "stripes" in (out / "settings.json").read_text()
