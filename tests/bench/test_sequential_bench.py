"""``bench.sequential`` (in ``make bench``) in its quick mode, so that the benchmark cannot rot: both samplers
certify through run_dataset and every field the docs read is written. Times are not asserted."""

from __future__ import annotations

import importlib
import json
import sys

import torch
from rs_testing import REPO


def test_quick_run_writes_the_throughput_ratio(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.sequential")
    threads = torch.get_num_threads()
    try:
        report = bench.main(["--quick", "--out", str(tmp_path / "sequential.json")])
    finally:
        torch.set_num_threads(threads)
    data = json.loads((tmp_path / "sequential.json").read_text())
    assert data == json.loads(json.dumps(report)) and data["benchmark"] == "sequential"
    rate = data["samples_per_s"]
    assert data["sequential_over_cohen_samples_per_s"] == rate["sequential"] / rate["cohen"]
    assert data["draws_per_input"]["cohen"] == 4_000 + 100  # n + n0 for every input
    assert data["draws_per_input"]["sequential"] < data["draws_per_input"]["cohen"]
