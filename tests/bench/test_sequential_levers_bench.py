"""``bench.sequential_levers`` (in ``make bench``) in its quick mode, so that the simulation cannot rot:
every model and setting is written, "before" is the rule the archived sequential runs used (its settings
written out, not inherited from today's defaults), and each setting's mean draws stay within n0 + n."""

from __future__ import annotations

import importlib
import json
import sys

from rs_testing import REPO


def test_quick_run_writes_every_setting_with_its_floor(tmp_path):
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    bench = importlib.import_module("bench.sequential_levers")
    report = bench.main(["--quick", "--out", str(tmp_path / "levers.json")])
    data = json.loads((tmp_path / "levers.json").read_text())
    assert data == json.loads(json.dumps(report)) and set(data["models"]) == set(bench.MODELS)
    assert bench.SETTINGS["before (beta=null)"] == {"beta": None, "alpha_spending": "even", "futility": False}
    for result in data["models"].values():
        for name in bench.SETTINGS:
            row = result[name]
            assert 100 < row["mean_samples"] <= 100_100 and row["mean_floor"] > 0
            assert row["draws_over_floor"] == row["mean_n"] / row["mean_floor"]
            assert row["draws_over_true_floor"] == row["mean_n"] / row["mean_true_floor"] > 0
            grid = len(result["cohen_certified_accuracy"])
            assert len(row["certified_accuracy"]) == len(row["radii"]) == grid
