"""docs/performance.md's method-step table is bench/results/method_steps.json's. Catches a
table left behind when the benchmark is re-run (it was: every cell came from an earlier JSON)."""

from __future__ import annotations

import json

from rs_testing import REPO


def test_the_method_step_table_is_the_committed_benchmark():
    results = json.loads((REPO / "bench" / "results" / "method_steps.json").read_text())["results"]
    lines = (REPO / "docs" / "performance.md").read_text().splitlines()
    start = lines.index(
        "| method | s / loader batch | × gaussian | passes measured (expected) | peak RSS MB |"
    )
    table = [line.split(" | ") for line in lines[start + 2 : start + 2 + len(results)]]
    assert len(table) == len(results) and lines[start + 2 + len(results)] == ""
    for cells, r in zip(table, results, strict=True):
        method, step, ratio, passes, rss = (c.strip("| ") for c in cells)
        assert method.split(" ")[0] == r["method"]
        assert step == f"{r['median_step_s']:.3f}" and ratio == f"{r['time_ratio']:.1f}"
        assert passes.split(" ")[0] == f"{r['measured_passes']:.2f}" and rss == f"{r['peak_rss_mb']:.0f}"
