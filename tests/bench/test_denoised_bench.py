"""``bench.denoised`` (in ``make bench``) in its quick mode on LeNet, so that the benchmark cannot rot: it
certifies with the real engine through f and f∘D at fp32 and bf16 and writes every field the docs read.
Times are not asserted (benchmarks, not unit tests, judge speed)."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
from rs_testing import REPO


def test_quick_run_writes_draws_per_second_and_ratios(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.denoised")
    threads = torch.get_num_threads()
    try:
        out = tmp_path / "denoised_cost.json"
        report = bench.main(
            [
                "--quick",
                "--settings",
                "lenet_mnist",
                "--denoisers",
                "dncnn_10x32",
                "ddpm_one_step",
                "--out",
                str(out),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(report)) and data["benchmark"] == "denoised_cost"
    (result,) = data["results"]
    assert result["setting"] == "lenet_mnist" and set(result["precision"]) == {"32", "bf16"}
    for row in result["precision"].values():
        assert set(row["draws_per_s"]) == {"f", "dncnn_10x32", "ddpm_one_step"}
        assert all(v > 0 for v in row["draws_per_s"].values())
        for key, ratio in row["over_f"].items():
            assert ratio == pytest.approx(row["draws_per_s"]["f"] / row["draws_per_s"][key], rel=1e-9)
