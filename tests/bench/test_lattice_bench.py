"""``bench.lattice`` (in ``make bench``) in its quick mode, so that the cost benchmark cannot rot: both
workloads, both noises, the ratio computed from the paired rounds; and the archived result of record holds
both workloads with the target it is read against."""

from __future__ import annotations

import importlib
import json
import statistics
import sys

from rs_testing import REPO


def test_quick_run_times_both_noises_on_both_workloads(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.lattice")
    report = bench.main(["--quick", "--out", str(tmp_path / "lattice.json")])
    data = json.loads((tmp_path / "lattice.json").read_text())
    assert data == json.loads(json.dumps(report)) and set(data["workloads"]) == set(bench.WORKLOADS)
    for row in data["workloads"].values():
        ratios = [
            a / b for a, b in zip(row["gaussian_lattice"]["times_s"], row["gaussian"]["times_s"], strict=True)
        ]
        assert abs(row["time_ratio"] - statistics.median(ratios)) < 0.01
    archived = json.loads((REPO / "bench" / "results" / "lattice_cost.json").read_text())
    assert set(archived["workloads"]) == set(bench.WORKLOADS) and archived["target_time_ratio"] == 1.15


def test_cuda_without_a_gpu_is_one_line_and_status_2(capsys, monkeypatch):
    """``make bench-gpu`` runs ``bench.lattice --device cuda``: without CUDA it stops before any timing with
    one ``error:`` line naming the fix, not a traceback from the first kernel."""
    import pytest

    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.lattice")
    monkeypatch.setattr(bench.torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--device", "cuda", "--quick"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: --device cuda") and len(err.splitlines()) == 1
