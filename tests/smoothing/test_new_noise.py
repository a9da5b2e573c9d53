"""A new noise is one class: a file in rs_lightning/smoothing/noises/ (docs/layout.md).

The test copies the package, the configs and the two entry points into a temporary folder and adds exactly
one file there: a noise of the Gaussian law whose draws are negated (so they differ from the Gaussian noise's)
and whose certificate is half Cohen's L2 radius (sound: half a certified radius is certified). It trains one
epoch with ``noise=`` that name and certifies the checkpoint. Catches a noise list someone must remember to
extend (train.py or the checkpoint loader refuses the name), and a path that ignores the class: certification
drawing the built-in Gaussian noise (the counts would equal a ``noise=gaussian`` run's on every input) or
stating Cohen's radius instead of the class's.
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

NOISE = '''"""Mirrored: Gaussian draws negated, certified at half Cohen's L2 radius (an example)."""

import numpy as np
import torch
from scipy.stats import norm

from rs_lightning.smoothing.noises.base import Noise


class Mirrored(Noise):
    name = "mirrored"
    norms = ("l2",)

    def sample(self, shape, generator, device, dtype=torch.float32, out=None):
        return torch.randn(shape, generator=generator, device=device, dtype=dtype, out=out).neg_()

    def radius(self, p, lam, norm_, dim):
        return 0.5 * lam * norm.ppf(p)

    def threshold(self, r, lam, norm_, dim):
        return norm.cdf(2 * np.asarray(r) / lam)
'''


def test_a_noise_is_one_class(tmp_path):
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("rs_lightning", "conf"):
        shutil.copytree(REPO / folder, repo / folder, ignore=ignore)
    for script in ("train.py", "certify.py"):
        shutil.copy(REPO / script, repo / script)
    (repo / "rs_lightning" / "smoothing" / "noises" / "mirrored.py").write_text(NOISE)

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
