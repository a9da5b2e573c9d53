"""scripts/sequential_comparison.py: the table of samplers on the same inputs, and --common-inputs for runs
still in progress (the evidence of docs/results.md "Sequential certification")."""

import json

from omegaconf import open_dict
from rs_testing import compose_config, run_script

from rs_lightning.cli.certify import certify

BASE = ["checkpoint=null", "model=constant", "data=digits", "sigma=0.25", "n=1000", "skip=9"]


def run(out, *overrides):
    cfg = compose_config("certify", [*BASE, f"output_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.device = "cpu"
    certify(cfg)


def test_runs_on_other_inputs_are_refused_unless_only_the_common_ones_are_compared(tmp_path):
    """A constant classifier: every sequential input stops once past the top grid radius (far fewer draws);
    the reference has 40 inputs and the sequential run the first 20, so only --common-inputs compares them,
    on those 20, and says so."""
    run(tmp_path / "cohen", "n0=10", "max=360")
    run(tmp_path / "sequential", "n0=10", "max=180", "sampling=sequential")
    args = [str(tmp_path / "cohen"), str(tmp_path / "sequential")]
    refused = run_script("scripts/sequential_comparison.py", *args)
    assert refused.returncode != 0 and "--common-inputs" in refused.stderr
    done = run_script(
        "scripts/sequential_comparison.py", *args, "--common-inputs", "--json", str(tmp_path / "t.json")
    )
    assert done.returncode == 0, done.stderr
    table = json.loads((tmp_path / "t.json").read_text())
    assert table["inputs"] == 20 and sorted(table["inputs_of_each_run"].values()) == [20, 40]
    cohen, sequential = table["runs"]
    assert cohen["mean_samples"] == 1010 and sequential["mean_samples"] < 0.6 * cohen["mean_samples"]
    assert (
        sequential["certified_accuracy"]
        == cohen["certified_accuracy"][: len(sequential["certified_accuracy"])]
    )
