"""certify.py noise=gaussian|laplace|uniform: the certificate in settings.json, the resume guard, the
report's protocol check, and one-line refusals of pairs without a certificate."""

import csv
import json
import math

import pytest
from omegaconf import open_dict
from rs_testing import assert_one_line_error, compose_config, run_script

from rs_lightning.cli.certify import certify
from rs_lightning.cli.report import main
from rs_lightning.validation import ConfigError

BASE = ["checkpoint=null", "model=constant", "data=digits", "sigma=0.25", "n0=10", "n=1000", "max=40"]
ALPHA = 0.001


def run(out, *overrides):
    cfg = compose_config("certify", [*BASE, f"output_dir={out}", *overrides])
    with open_dict(cfg):
        cfg.device = "cpu"
    return certify(cfg)


def radii(folder) -> list[float]:
    with (folder / "certify.tsv").open() as f:
        return [float(r["radius"]) for r in csv.DictReader(f, delimiter="\t") if r["correct"] == "1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("noises")
    run(root / "gaussian_l1", "norm=l1")
    run(root / "laplace", "noise=laplace")
    run(root / "uniform", "noise=uniform")
    return root


def test_each_noise_certifies_its_closed_form_radius_and_records_it(runs):
    """A constant classifier gets all n draws, so p_A_lower = alpha^(1/n) and the radius is each noise's
    closed form at that bound with lambda from sigma = 0.25 (Laplace sigma/sqrt 2, uniform sqrt 3 sigma)."""
    p = ALPHA ** (1 / 1000)
    lam_laplace, lam_uniform = 0.25 / math.sqrt(2), math.sqrt(3) * 0.25
    expected = {"laplace": -lam_laplace * math.log(2 * (1 - p)), "uniform": 2 * lam_uniform * (p - 0.5)}
    for noise, radius in expected.items():
        got = radii(runs / noise)
        assert got and all(r == pytest.approx(radius, abs=1e-6) for r in got)
        settings = json.loads((runs / noise / "settings.json").read_text())
        assert settings["noise"] == noise and settings["norm"] == "l1"
    gaussian = json.loads((runs / "gaussian_l1" / "settings.json").read_text())
    assert gaussian["noise"] == "gaussian" and gaussian["norm"] == "l1"


def test_a_folder_of_one_noise_is_not_resumed_with_another(runs):
    before = (runs / "laplace" / "certify.tsv").read_text()
    with pytest.raises(ConfigError, match="noise"):
        run(runs / "laplace", "noise=uniform")
    assert (runs / "laplace" / "certify.tsv").read_text() == before


def test_the_report_refuses_mixed_noises(runs, tmp_path, capsys):
    """Two runs of the same inputs with different noises: the protocol check names the noise."""
    assert main([str(runs / "laplace"), str(runs / "uniform"), "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "noise" in err


@pytest.mark.parametrize(
    ("overrides", "needles"),
    [
        (["noise=laplace", "norm=l2"], ("norm", "gaussian+l2", "laplace+l1", "uniform+linf")),
        (["noise=cauchy"], ("noise", "cauchy", "gaussian, gaussian_lattice, laplace, uniform")),
    ],
)
def test_a_pair_without_a_certificate_is_one_line(tmp_path, overrides, needles):
    done = run_script("certify.py", *BASE, *overrides, f"output_dir={tmp_path / 'x'}")
    assert_one_line_error(done, *needles)
    assert not (tmp_path / "x" / "certify.tsv").exists()
