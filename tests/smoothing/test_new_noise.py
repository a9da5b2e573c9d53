"""A new noise is one class: a file in rs_lightning/smoothing/noises/ (docs/layout.md).

The test copies the package, the configs and the two entry points into a temporary folder and adds exactly
one file there, the class docs/layout.md shows: a noise of the Gaussian law whose draws are negated (so they
differ from the Gaussian noise's) and whose certificate is half Cohen's L2 radius (sound: half a certified
radius is certified). It trains one epoch with ``noise=`` that name and certifies the checkpoint. Catches a
noise list someone must remember to extend (train.py or the checkpoint loader refuses the name), and a path
that ignores the class: certification drawing the built-in Gaussian noise (the counts would equal a
``noise=gaussian`` run's on every input) or stating Cohen's radius instead of the class's.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
from rs_testing import REPO
from scipy.stats import norm

from rs_lightning.runs import read_results


def documented_noise() -> str:
    """The class docs/layout.md shows ("A new noise is one class"): the test runs the documented code."""
    text = (REPO / "docs" / "layout.md").read_text()
    section = text[text.index("### A new noise is one class") :]
    return section[section.index("```python\n") + len("```python\n") : section.index("```\n", 10)]


def test_a_noise_is_one_class(tmp_path):
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("rs_lightning", "conf"):
        shutil.copytree(REPO / folder, repo / folder, ignore=ignore)
    for script in ("train.py", "certify.py"):
        shutil.copy(REPO / script, repo / script)
    (repo / "rs_lightning" / "smoothing" / "noises" / "mirrored.py").write_text(documented_noise())

    def run(script: str, *overrides: str) -> None:
        command = [sys.executable, script, *overrides]
        done = subprocess.run(command, cwd=repo, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    train = tmp_path / "train"
    recipe = ["data=digits", "optim=digits", "optim.max_epochs=1", "~callbacks.certification", "logger=csv"]
    run(
        "train.py",
        "noise=mirrored",
        "sigma=0.25",
        *recipe,
        "trainer.enable_progress_bar=false",
        f"hydra.run.dir={train}",
    )
    checkpoint = train / "checkpoints" / "last.ckpt"
    rows = {}
    for noise in ("null", "gaussian"):  # null: the checkpoint's training noise, the new one
        out = tmp_path / f"certify-{noise}"
        overrides = [f"checkpoint={checkpoint}", f"noise={noise}", "n=200", "skip=20"]
        run("certify.py", *overrides, f"hydra.run.dir={out}", f"output_dir={out}")
        rows[noise] = read_results(out / "certify.tsv")
        settings = json.loads((out / "settings.json").read_text())
        assert settings["noise"] == ("mirrored" if noise == "null" else "gaussian")
        assert settings["train_noise"] == "mirrored"
    new, gaussian = rows["null"], rows["gaussian"]
    assert new["idx"].size >= 10 and np.array_equal(new["idx"], gaussian["idx"])
    assert not np.array_equal(new["nA"], gaussian["nA"]), "the new noise's draws were not used"
    certified = new["pA_lower"] > 0.5
    assert certified.any()
    half_cohen = 0.5 * 0.25 * norm.ppf(new["pA_lower"][certified])
    np.testing.assert_allclose(new["radius"][certified], half_cohen, rtol=1e-5)
    cohen = gaussian["pA_lower"] > 0.5
    np.testing.assert_allclose(
        gaussian["radius"][cohen], 0.25 * norm.ppf(gaussian["pA_lower"][cohen]), rtol=1e-5
    )
