"""``bench.gpu`` (the GPU device check, ``make bench-gpu``) run on the CPU with tiny sizes (``--smoke``), so
that the script cannot rot on machines without a GPU: every case and setting, the per-cell error guard
(float16 is refused on a CPU), the time limit and the fail-fast without CUDA."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
from rs_testing import REPO

SETTINGS = ["fp32", "fp32_cl", "bf16", "bf16_cl", "fp16", "fp16_cl"]
CASES = {"lenet_mnist": 10_000, "resnet110_cifar": 10_000, "resnet50_imagenet": 500}


@pytest.fixture(scope="module")
def gpu():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("bench.gpu")


@pytest.fixture
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_smoke_run_writes_every_cell(gpu, tmp_path, keep_threads):
    out = tmp_path / "gpu.json"
    report = gpu.main(["--device", "cpu", "--smoke", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(report))
    assert {
        "benchmark",
        "schema",
        "smoke",
        "complete",
        "machine",
        "settings",
        "notes",
        "cases",
        "errors",
        "wall_s",
    } <= set(data)
    assert data["smoke"] is True and data["complete"] is True and data["errors"] == 6  # fp16 on 3 cases
    assert {"device", "torch", "cudnn_benchmark", "cudnn_allow_tf32", "date"} <= set(data["machine"])
    assert data["settings"]["cudnn_benchmark"] is False
    assert list(data["cases"]) == list(CASES)
    for name, inputs in CASES.items():
        entry = data["cases"][name]
        assert list(entry["cells"]) == SETTINGS
        for setting, cell in entry["cells"].items():
            if setting.startswith("fp16"):
                assert cell["status"] == "error" and "CUDA" in cell["error"]
                continue
            assert cell["status"] == "ok", cell
            assert cell["precision"] in ("32", "bf16") and cell["channels_last"] == setting.endswith("_cl")
            for impl in ("raw", "engine"):
                assert cell[impl]["median_samples_per_s"] > 0 and len(cell[impl]["times_s"]) == 1
            assert cell["ratio"] > 0 and cell["ratio_paired_median"] > 0
        assert entry["best_setting"] in SETTINGS[:4]
        assert entry["engine_speedup_over_fp32"]["fp32"] == pytest.approx(1.0)
        implied = entry["implied_certification"]
        assert (implied["inputs"], implied["n"], implied["n0"]) == (inputs, 100_000, 100)
        assert implied["fp32"]["setting"] == "fp32" and implied["best"]["setting"] == entry["best_setting"]
        assert implied["best"]["hours"] <= implied["fp32"]["hours"]


def test_time_limit_skips_the_remaining_cells(gpu, tmp_path, keep_threads):
    out = tmp_path / "gpu.json"
    gpu.main(["--device", "cpu", "--smoke", "--cases", "lenet_mnist", "--time-limit", "0", "--out", str(out)])
    data = json.loads(out.read_text())
    cells = data["cases"]["lenet_mnist"]["cells"]
    assert [c["status"] for c in cells.values()] == ["skipped"] * len(SETTINGS)
    assert data["complete"] is False and "time limit" in data["notes"][0]
    assert data["cases"]["lenet_mnist"]["implied_certification"]["best"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_without_cuda_it_stops_at_once(gpu, tmp_path):
    out = tmp_path / "gpu.json"
    with pytest.raises(SystemExit) as stop:
        gpu.main(["--out", str(out)])
    assert "no CUDA device" in str(stop.value.code) and "--device cpu --smoke" in str(stop.value.code)
    assert not out.exists()
