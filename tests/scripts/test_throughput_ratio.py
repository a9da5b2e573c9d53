"""scripts/throughput_ratio.py: certified inputs/s of a fast run over a slow one, from their summaries."""

import json
from pathlib import Path

import pytest
from rs_testing import REPO, run_script

HEADLINE = REPO / "docs" / "results" / "sequential" / "runs" / "headline"


def test_the_ratio_is_the_fast_runs_rate_over_the_slow_ones():
    """Catches the runs swapped (the inverse ratio) or a rate read from the wrong key."""
    slow, fast = (HEADLINE / name for name in ("cohen_fp32", "sequential_bf16"))
    done = run_script("scripts/throughput_ratio.py", str(slow), str(fast))
    assert done.returncode == 0, done.stderr
    stored = {p: json.loads((p / "summary.json").read_text()) for p in (slow, fast)}
    rate = {p: stored[p]["throughput"]["inputs_per_s"] for p in (slow, fast)}
    assert rate[fast] > 2 * rate[slow]  # the archived headline: several times faster
    printed = float(done.stdout.strip().splitlines()[-1].split(": ")[1].rstrip("x"))
    assert printed == pytest.approx(rate[fast] / rate[slow], abs=0.005)


def test_a_folder_without_a_summary_is_refused_in_one_line(tmp_path: Path):
    done = run_script("scripts/throughput_ratio.py", str(tmp_path), str(HEADLINE / "sequential_bf16"))
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and len(done.stderr.strip().splitlines()) == 1
