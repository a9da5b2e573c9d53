"""``bench.ars`` (in ``make bench``) in its quick mode on the small setting, so that the benchmark cannot rot:
it certifies with the real engine through vanilla, ARS and static pipelines around one classifier and writes
every field the README and docs read. Times are not asserted (benchmarks, not unit tests, judge speed)."""

from __future__ import annotations

import importlib
import json
import sys

import torch
from rs_testing import REPO


def test_quick_run_writes_the_cost_ratios(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.ars")
    threads = torch.get_num_threads()
    try:
        out = tmp_path / "ars_cost.json"
        report = bench.main(["--quick", "--settings", "lenet_cluttered_mnist_k56", "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(report)) and data["benchmark"] == "ars_cost"
    (result,) = data["results"]
    assert result["setting"] == "lenet_cluttered_mnist_k56" and result["input_shape"] == [1, 56, 56]
    assert set(result["seconds_median"]) == {"vanilla", "ars", "static"}
    assert all(v > 0 for v in result["seconds_median"].values())
    ratio = result["seconds_median"]["ars"] / result["seconds_median"]["vanilla"]
    assert result["ars_over_vanilla"] == ratio
