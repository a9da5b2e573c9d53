"""certify.py noise=gaussian_lattice: inputs off the 8-bit grid refused before any work, quantize=true, rows
with the lattice certificate under every sampler, and rows independent of the batch size."""

import csv
import json

import numpy as np
import pytest
import torch
from omegaconf import open_dict
from rs_testing import compose_config
from scipy.stats import norm

from rs_lightning.cli.certify import certify
from rs_lightning.cli.report.compare import report
from rs_lightning.smoothing.noises import gaussian_lattice as lattice
from rs_lightning.smoothing.noises.gaussian_lattice import lattice_table
from rs_lightning.validation import ConfigError

BASE = ["n0=10", "n=500", "max=12"]
CONSTANT = ["checkpoint=null", "model=constant", "data=digits", "sigma=0.25"]
LATTICE = ["noise=gaussian_lattice"]


def run(out, *overrides):
    cfg = compose_config("certify", [*BASE, f"output_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.device = "cpu"
    return certify(cfg)


def rows(folder):
    with (folder / "certify.tsv").open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def test_digits_are_off_the_grid_and_refused_before_any_work(tmp_path):
    """sklearn's digits are v/16: lattice noise refuses them, naming quantize=true, and writes nothing."""
    with pytest.raises(ConfigError, match=r"quantize=False.*off the 8-bit pixel grid.*quantize=true"):
        run(tmp_path / "refused", *CONSTANT, *LATTICE)
    assert not (tmp_path / "refused" / "certify.tsv").exists()


@pytest.mark.parametrize("sampling", ["cohen", "iss", "sequential"])
def test_quantized_inputs_get_the_lattice_certificate(tmp_path, trained_digits, sampling):
    """The demo's digits CNN with quantize=true: every sampler writes rows whose radius is
    σΦ⁻¹(pA_lower − d·τ) (scipy; d = 64), and settings.json records the noise and the quantization.
    Catches Cohen's radius on lattice rows or the quantization left out of the record."""
    extra = [] if sampling == "cohen" else [f"sampling={sampling}", "n0=null"]
    out = tmp_path / sampling
    run(out, f"checkpoint={trained_digits['checkpoint']}", *LATTICE, "quantize=true", *extra)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["noise"] == "gaussian_lattice" and settings["quantized"] is True and settings["dim"] == 64
    got = rows(out)
    assert len(got) == 12
    slack = 64 * lattice_table(0.25).tv
    lower = np.array([float(r["pA_lower"]) for r in got])
    radius = np.array([float(r["radius"]) for r in got])
    certified = lower > 0.5
    assert certified.any()
    np.testing.assert_allclose(radius[certified], 0.25 * norm.ppf(lower[certified] - slack), rtol=1e-5)


def test_inputs_on_the_grid_are_certified_with_lattice_noise_by_default(tmp_path, trained_digits):
    """No ``noise=``: the Gaussian-trained digits CNN on quantized digits gets lattice noise (settings.json),
    the same rows as ``noise=gaussian_lattice``; on the digits as they are (v/16, off the grid) float noise,
    as before. Catches the default not applied, or applied to data off the grid (refused)."""
    model = f"checkpoint={trained_digits['checkpoint']}"
    run(tmp_path / "default", model, "quantize=true")
    run(tmp_path / "given", model, "quantize=true", *LATTICE)
    run(tmp_path / "digits", model)
    settings = json.loads((tmp_path / "default" / "settings.json").read_text())
    assert settings["noise"] == "gaussian_lattice" and settings["train_noise"] == "gaussian"
    drop = lambda r: {k: v for k, v in r.items() if k != "time"}  # noqa: E731
    assert [drop(r) for r in rows(tmp_path / "default")] == [drop(r) for r in rows(tmp_path / "given")]
    assert json.loads((tmp_path / "digits" / "settings.json").read_text())["noise"] == "gaussian"


def test_rows_do_not_depend_on_the_batch_size_and_a_rerun_resumes(tmp_path, trained_digits):
    """The digits CNN: batch sizes 37 and 1000 give the same nA on every input (the per-input lattice
    streams), float noise gives other counts, and a rerun into a finished folder keeps its rows."""
    model = f"checkpoint={trained_digits['checkpoint']}"
    run(tmp_path / "a", model, *LATTICE, "quantize=true", "batch_size=37")
    run(tmp_path / "b", model, *LATTICE, "quantize=true", "batch_size=1000")
    run(tmp_path / "float", model, "quantize=true", "noise=gaussian")
    a, b = rows(tmp_path / "a"), rows(tmp_path / "b")
    assert [r["nA"] for r in a] == [r["nA"] for r in b]
    assert [r["nA"] for r in a] != [r["nA"] for r in rows(tmp_path / "float")]
    run(tmp_path / "b", model, *LATTICE, "quantize=true", "batch_size=1000")
    assert rows(tmp_path / "b") == b


def test_flagged_draws_reach_the_row_the_summary_and_the_report(tmp_path, monkeypatch, capsys):
    """A table of half-width 1 flags about one coordinate in seven (at σ = 1/255; patched in at any σ), so
    nearly every 64-pixel copy: the rows count their flagged draws, summary.json totals them, certify.py
    prints the total and the report notes it; a run with the real table flags none and says nothing.
    Catches flagged draws that vanish between the engine and what a user reads."""
    edges = lattice._ceilings(lattice._cdf_edges(1 / 255, 1, 50), 50)
    coarse = lattice.LatticeTable(torch.tensor(edges, dtype=torch.int64), 1, 0.0)
    plain = run(tmp_path / "plain", *CONSTANT, *LATTICE, "quantize=true")
    assert plain["flagged_draws"] == 0 and "flagged draws" not in capsys.readouterr().out
    with monkeypatch.context() as patch:
        patch.setattr(lattice, "lattice_table", lambda sigma: coarse)
        summary = run(tmp_path / "coarse", *CONSTANT, *LATTICE, "quantize=true")
    flagged = [int(r["flagged"]) for r in rows(tmp_path / "coarse")]
    assert all(0 < f <= 500 for f in flagged) and summary["flagged_draws"] == sum(flagged)
    assert f"flagged draws (no class)   {sum(flagged)}" in capsys.readouterr().out
    report([str(tmp_path / "coarse"), str(tmp_path / "plain")], str(tmp_path / "out"), resamples=50)
    text = (tmp_path / "out" / "report.md").read_text()
    notes = [line for line in text.splitlines() if "flagged draws (lattice" in line]
    assert len(notes) == 1 and f"{sum(flagged)} flagged draws" in notes[0]


def test_training_with_lattice_noise_on_data_off_the_grid_is_refused_before_the_first_epoch(tmp_path):
    """train.py noise=gaussian_lattice on the digits (v/16) with the certification callback: refused at fit
    start naming the noise, not a traceback at the first certification epoch."""
    from rs_testing import train_config

    from rs_lightning.cli.train import train

    with pytest.raises(ConfigError, match=r"noise='gaussian_lattice'.*off the 8-bit grid"):
        train(train_config(tmp_path, ["noise=gaussian_lattice", "optim.max_epochs=1"]))
    assert not list(tmp_path.rglob("*.ckpt"))


def test_quantized_rows_carry_another_fingerprint():
    """quantize=true is part of what a row was certified of: its fingerprint differs from the same run's on
    the raw inputs, while a run that does not set it keeps the fingerprint it had before the key existed."""
    from rs_lightning.runs import RunRecord
    from rs_lightning.smoothing import CertificationSpec

    spec = CertificationSpec(sigma=0.25).as_dict()
    raw, quantized = RunRecord(**spec), RunRecord(**spec, quantized=True)
    assert raw.fingerprint() != quantized.fingerprint()
    before = {k: v for k, v in raw.to_dict().items() if k != "quantized"}  # settings.json without the key
    assert RunRecord.from_dict(before).fingerprint() == raw.fingerprint()


def test_parts_merge_into_the_single_process_rows(tmp_path, trained_digits):
    """shard=0/2 and 1/2 into one folder merge into the rows of one process (the time column aside):
    lattice streams are per input, as float ones. Catches noise seeded by the position in a part."""
    model = f"checkpoint={trained_digits['checkpoint']}"
    run(tmp_path / "one", model, *LATTICE, "quantize=true")
    for shard in ("0/2", "1/2"):
        run(tmp_path / "parts", model, *LATTICE, "quantize=true", f"shard={shard}")
    strip = lambda rows_: [{k: v for k, v in r.items() if k != "time"} for r in rows_]  # noqa: E731
    assert strip(rows(tmp_path / "parts")) == strip(rows(tmp_path / "one"))


@pytest.mark.parametrize("setting", [["precision=bf16", "channels_last=true"], ["trainer=ddp_sim"]])
def test_lattice_rows_at_bf16_and_over_ranks(tmp_path, trained_digits, setting):
    """bf16 + channels_last is another base classifier on the same lattice points: rows are written with the
    lattice certificate; two simulated DDP ranks give the rows of one process (per-input streams)."""
    model = f"checkpoint={trained_digits['checkpoint']}"
    run(tmp_path / "one", model, *LATTICE, "quantize=true")
    run(tmp_path / "other", model, *LATTICE, "quantize=true", *setting)
    one, other = rows(tmp_path / "one"), rows(tmp_path / "other")
    assert [r["idx"] for r in other] == [r["idx"] for r in one]
    settings = json.loads((tmp_path / "other" / "settings.json").read_text())
    assert settings["noise"] == "gaussian_lattice"
    lower = np.array([float(r["pA_lower"]) for r in other])
    radius = np.array([float(r["radius"]) for r in other])
    slack = 64 * lattice_table(0.25).tv
    np.testing.assert_allclose(radius[lower > 0.5], 0.25 * norm.ppf(lower[lower > 0.5] - slack), rtol=1e-5)
    if setting == ["trainer=ddp_sim"]:
        assert [r["nA"] for r in other] == [r["nA"] for r in one]
    else:
        agree = np.mean([a["nA"] == b["nA"] for a, b in zip(one, other, strict=True)])
        assert settings["precision"] == "bf16" and agree >= 0.5  # bf16 flips few votes of 500


@pytest.mark.slow
def test_lattice_rows_compiled(tmp_path, trained_digits):
    """compile=true with lattice noise on the digits CNN: torch.compile really compiles (no eager fallback
    warning) and the rows' counts are those of the eager run, so compile is another implementation of the
    same base classifier on the lattice points. Catches a compiled path that bypasses the lattice sum."""
    import warnings

    model = f"checkpoint={trained_digits['checkpoint']}"
    run(tmp_path / "eager", model, *LATTICE, "quantize=true")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(tmp_path / "compiled", model, *LATTICE, "quantize=true", "compile=true")
    assert not [w for w in caught if "torch.compile failed" in str(w.message)]
    counts = lambda folder: [(r["predict"], r["nA"], r["n"], r["flagged"]) for r in rows(folder)]  # noqa: E731
    assert counts(tmp_path / "compiled") == counts(tmp_path / "eager")
    assert json.loads((tmp_path / "compiled" / "settings.json").read_text())["compile"] is True
