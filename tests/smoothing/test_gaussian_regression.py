"""Gaussian CERTIFY is bit-identical to the code before the certificate redesign ("Existing Gaussian
results bit-identical before and after the redesign"). ``data/gaussian_rows_1d07e4a.json`` holds the rows the
tree of commit 1d07e4a (the last before ``smoothing.certificate``) wrote for a fixed network on 12 digits —
Cohen's sampling with L2 and L∞ radii, and input-specific sampling — made by running this file as a script
against that tree::

    git archive 1d07e4a rs_lightning | tar -x -C /tmp/old
    PYTHONPATH=/tmp/old python tests/smoothing/test_gaussian_regression.py \
        > tests/smoothing/data/gaussian_rows_1d07e4a.json

Catches any change of the Gaussian noise stream, its scale, the selection/estimation split, the bound or the
radius formula (each moves a count or a radius here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from sklearn.datasets import load_digits

from rs_lightning.smoothing import CertificationSpec, InputSpecific, certify_batch

GOLDEN = Path(__file__).parent / "data" / "gaussian_rows_1d07e4a.json"
FIELDS = ("predict", "radius", "n_a", "pa_lower", "n")


def network() -> torch.nn.Module:
    torch.manual_seed(0)
    layers = [torch.nn.Flatten(), torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10)]
    return torch.nn.Sequential(*layers).eval()


def rows() -> dict:
    digits = load_digits()
    xs = torch.tensor(digits.images[-12:] / 16.0, dtype=torch.float32).reshape(12, 1, 8, 8)
    settings = {
        "cohen_l2": {"norm": "l2"},
        "cohen_linf": {"norm": "linf"},
        "iss_ad005": {
            "sampling": "iss",
            "n0": None,
            "sampler": InputSpecific(decline="ad", max_decline=0.05, k0=50, granularity=10),
        },
    }
    out = {}
    for name, extra in settings.items():
        base = {"sigma": 0.25, "n0": 64, "n": 500, "alpha": 0.001, "seed": 0, "batch_size": 200}
        result = certify_batch(
            network(), xs, list(range(12)), CertificationSpec(**(base | extra)), num_classes=10
        )
        out[name] = {key: np.asarray(getattr(result, key)).tolist() for key in FIELDS}
    return out


def test_gaussian_rows_are_those_of_the_code_before_the_certificate_redesign():
    assert rows() == json.loads(GOLDEN.read_text())  # exact: counts, bounds and radii to the last bit


if __name__ == "__main__":
    json.dump(rows(), sys.stdout, indent=1)
