"""The sampler contract: a sampler defined here alone, registered, runs through certify.py, shards, a resume
and the report, with no change to the library (docs/layout.md "A new sampler is one file plus one table
entry"). Catches a sampler-specific branch left in the spec, the engine, the run record, the resume check or
the report: this sampler is none of those they know."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest
from rs_testing import certify_config

from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main as report_main
from rs_lightning.runs import read_results
from rs_lightning.smoothing import SAMPLERS, CertificationSpec, Sampler, register_sampler
from rs_lightning.smoothing.noise import Phase
from rs_lightning.smoothing.samplers import Draws
from rs_lightning.validation import ConfigError


@dataclass(frozen=True)
class HalfBudget(Sampler):
    """Cohen's sampling with the estimation draws cut to n * share (a test sampler, not a method)."""

    share: float = 0.5
    name = "half_budget"

    def draws(self, spec) -> int:
        return max(1, int(spec.n * self.share))

    def draw(self, spec, count, groups, dim):
        counts0 = count(Phase.SELECTION, spec.n0)
        counts = count(Phase.ESTIMATION, self.draws(spec))
        n0, n = np.full(groups, spec.n0), np.full(groups, self.draws(spec))
        return Draws(counts0, counts0.argmax(dim=1), counts, n, n0, n0 + n, np.full(groups, spec.alpha))

    def rows_fit(self, spec, n, n0, n_a0=None, dim=None):
        return (np.asarray(n) == self.draws(spec)) & (np.asarray(n0) == spec.n0)

    def expected(self, spec) -> str:
        return f"n={self.draws(spec)}, n0={spec.n0}"


if "half_budget" not in SAMPLERS:
    register_sampler(HalfBudget)
SETTINGS = ["n=400", "skip=30", "sampling=half_budget", "+half_budget.share=0.25"]


def test_registration_refuses_a_taken_name_and_a_non_sampler():
    @dataclass(frozen=True)
    class Other(Sampler):
        name = "half_budget"

    with pytest.raises(ValueError, match="taken"):
        register_sampler(Other)
    with pytest.raises(TypeError):
        register_sampler(dict)
    spec = CertificationSpec(sigma=0.5, n=400, sampling="half_budget", sampler={"share": 0.25})
    assert spec.sampler == HalfBudget(0.25) and spec.as_dict()["sampler"] == {"share": 0.25}
    with pytest.raises(ConfigError, match=r"^half_budget=\['portion'\] .*keys of share"):
        CertificationSpec(sigma=0.5, sampling="half_budget", sampler={"portion": 0.25})


def test_a_registered_sampler_certifies_resumes_shards_and_reports(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    summary = certify(certify_config(tmp_path / "one", ckpt, SETTINGS))
    settings = json.loads((tmp_path / "one" / "settings.json").read_text())
    assert settings["sampling"] == "half_budget" and settings["sampler"] == {"share": 0.25}
    rows = read_results(tmp_path / "one" / "certify.tsv")
    assert (
        (rows["n"] == 100).all()
        and (rows["samples"] == 200).all()
        and summary["num_inputs"] == len(rows["n"])
    )
    # shards: two parts give the single run's rows
    for part in ("0/2", "1/2"):
        certify(certify_config(tmp_path / "parts", ckpt, [*SETTINGS, f"shard={part}"]))
    drop_time = lambda p: [  # noqa: E731
        "\t".join(f for j, f in enumerate(line.split("\t")) if j != 5) for line in p.read_text().splitlines()
    ]
    assert drop_time(tmp_path / "parts" / "certify.tsv") == drop_time(tmp_path / "one" / "certify.tsv")
    # resume: a run killed mid-row continues to the same rows; another share is refused
    lines = (tmp_path / "one" / "certify.tsv").read_text().splitlines()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "certify.tsv").write_text("\n".join(lines[:5]) + "\n" + lines[5][:9])
    with pytest.warns(UserWarning, match="incomplete last row"):
        certify(certify_config(tmp_path / "b", ckpt, SETTINGS))
    assert drop_time(tmp_path / "b" / "certify.tsv") == drop_time(tmp_path / "one" / "certify.tsv")
    with pytest.raises(ConfigError, match=r"sampler: \{'share': 0.25\} there, \{'share': 0.5\} now"):
        certify(certify_config(tmp_path / "b", ckpt, [*SETTINGS[:3], "+half_budget.share=0.5"]))
    (tmp_path / "b" / "settings.json").unlink()  # without settings: the sampler's own rule for the rows' n
    with pytest.raises(ConfigError, match=r"rows with n=100, n0=100 .* this run has n=200, n0=100"):
        certify(certify_config(tmp_path / "b", ckpt, [*SETTINGS[:3], "+half_budget.share=0.5"]))
    # the report reads it and names the sampler
    assert report_main([str(tmp_path / "one"), "--out", str(tmp_path / "r")]) == 0
    assert "half_budget" in (tmp_path / "r" / "report.md").read_text()
