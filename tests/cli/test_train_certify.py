"""End to end: train.py then certify.py on the embedded digits, through the real config tree."""

import json

import numpy as np
import pytest
import torch
from rs_testing import REPO, certify_config, train_config

from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import train
from rs_lightning.runs import COLUMNS, read_results
from rs_lightning.validation import ConfigError


def test_checkpoint_carries_everything_certification_needs(trained_digits):
    checkpoint = torch.load(trained_digits["checkpoint"], weights_only=True)  # no code can run
    meta = checkpoint["rs_lightning"]
    assert meta["sigma"] == 0.25
    assert meta["model"]["_target_"] == "rs_lightning.models.digits.DigitsCNN"
    assert meta["input_shape"] == [1, 8, 8] and meta["num_classes"] == 10 and len(meta["class_names"]) == 10
    assert meta["data"]["_target_"] == "rs_lightning.data.digits.DigitsDataModule"
    assert meta["method"]["_target_"].endswith("GaussianAugmentation")


def test_callback_numbers_equal_certify_numbers(trained_digits, tmp_path):
    """The epoch-end callback and certify.py run the same engine with the same seed, subset and n."""
    from rs_lightning.callbacks import CertificationCallback

    cb = CertificationCallback(num_inputs=24, n=200, batch_size=300)  # the fixture's settings
    args = cb.certify_command_args(360)
    overrides = [f"{k}={v}" for k, v in args.items()] + ["batch_size=300"]
    summary = certify(certify_config(tmp_path, trained_digits["checkpoint"], overrides))
    logged = trained_digits["metrics"]
    assert summary["num_inputs"] == 24
    assert logged["val/acr"] == pytest.approx(summary["acr"], abs=1e-6)
    assert logged["val/pa_mean"] == pytest.approx(summary["pa_mean"], abs=1e-6)
    for radius, accuracy in summary["certified_accuracy"].items():
        assert logged[f"val/certified_accuracy@{float(radius):g}"] == pytest.approx(accuracy, abs=1e-6)
    assert logged["val/abstain_rate"] == pytest.approx(summary["abstain_rate"], abs=1e-6)
    # the band the callback logs is the one the report computes from certify.py's rows
    from rs_lightning.analysis.run_view import load_run
    from rs_lightning.analysis.uncertainty import Counts, pa_curve_band

    band = pa_curve_band(Counts.from_rows(load_run(tmp_path).rows), 0.05)
    assert logged["val/pa_band_halfwidth"] == pytest.approx(band.max_half_width, abs=1e-6)
    assert (band.lower <= band.point + 1e-12).all() and (band.point <= band.upper + 1e-12).all()


def test_certify_outputs_and_demo_accuracy_far_above_chance(trained_digits, tmp_path):
    summary = certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=500", "skip=6"]))
    assert summary["num_inputs"] == 60
    assert summary["clean_accuracy"] > 0.85  # chance is 0.1; the demo measured 0.98 on all 360 inputs
    assert summary["acr"] > 0.1
    for name in ("certify.tsv", "summary.json", "settings.json", "certified_accuracy.png", "pa_ecdf.png"):
        assert (tmp_path / name).stat().st_size > 0
    lines = (tmp_path / "certify.tsv").read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS) and len(lines) == 61
    rows = read_results(tmp_path / "certify.tsv")
    assert rows["idx"].tolist() == list(range(0, 360, 6))
    assert (rows["n"] == 500).all() and (rows["n0"] == 100).all()
    np.testing.assert_allclose(rows["pA_hat"], rows["nA"] / 500)
    assert ((rows["predict"] == -1) <= (rows["radius"] == 0)).all()
    assert (rows["correct"] == (rows["predict"] == rows["label"])).all()
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["settings"]["n"] == 500 and saved["settings"]["subset"]["skip"] == 6
    assert set(saved) >= {
        "acr",
        "clean_accuracy",
        "abstain_rate",
        "certified_accuracy",
        "pa_ecdf",
        "num_inputs",
    }


def test_resume_never_loses_or_duplicates_rows(trained_digits, tmp_path):
    ckpt = trained_digits["checkpoint"]
    full = certify(certify_config(tmp_path / "full", ckpt, ["n=300", "skip=20"]))
    certify(certify_config(tmp_path / "part", ckpt, ["n=300", "skip=20", "max=200"]))
    path = tmp_path / "part" / "certify.tsv"
    text = path.read_text()
    path.write_text(text[: len(text) - 7])  # a run killed in the middle of writing its last row
    with pytest.warns(UserWarning, match="incomplete last row"):
        resumed = certify(certify_config(tmp_path / "part", ckpt, ["n=300", "skip=20"]))
    rows = read_results(path)
    assert sorted(rows["idx"].tolist()) == list(range(0, 360, 20)) and len(rows["idx"]) == 18
    reference = read_results(tmp_path / "full" / "certify.tsv")
    order = np.argsort(rows["idx"])
    for column in ("predict", "radius", "nA", "nA0"):
        np.testing.assert_array_equal(rows[column][order], reference[column])
    assert resumed["acr"] == full["acr"]


def test_rerun_with_other_settings_into_the_same_folder_is_refused(trained_digits, tmp_path):
    certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=100", "max=20", "skip=10"]))
    with pytest.raises(ConfigError, match=r"n: 100 there, 200 now"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], ["n=200", "max=20", "skip=10"]))


def test_sigma_differs_from_checkpoint_only_with_explicit_override(trained_digits, tmp_path):
    with pytest.raises(ConfigError, match=r"sigma=0.5 .*override_sigma=true"):
        certify(certify_config(tmp_path, trained_digits["checkpoint"], ["sigma=0.5", "max=10"]))
    summary = certify(
        certify_config(
            tmp_path, trained_digits["checkpoint"], ["sigma=0.5", "override_sigma=true", "n=100", "max=5"]
        )
    )
    assert summary["settings"]["sigma"] == 0.5 and summary["settings"]["train_sigma"] == 0.25
    assert summary["settings"]["sigma_overridden"] is True


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("sigma=-0.1", "sigma"),
        ("alpha=1.5", "alpha"),
        ("alpha=0", "alpha"),
        ("n0=0", "n0"),
        ("n=0", "n"),
        ("batch_size=0", "batch_size"),
        ("skip=0", "skip"),
    ],
)
def test_bad_certify_values_fail_before_any_work(tmp_path, override, key):
    cfg = certify_config(tmp_path, tmp_path / "missing.ckpt", [override])
    with pytest.raises(ConfigError, match=rf"^{key}=.* must be"):
        certify(cfg)  # the checkpoint does not exist: the value check comes first
    assert not (tmp_path / "certify.tsv").exists()


def test_bad_sigma_for_training_fails_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match=r"^sigma=0.0 is invalid: sigma must be > 0"):
        train(train_config(tmp_path, ["sigma=0.0"]))
    assert not (tmp_path / "checkpoints").exists()


def test_training_resumes_from_its_last_checkpoint(tmp_path):
    """ckpt_path=last.ckpt continues the schedule (epoch count, optimizer, noise generator state)."""
    first = train(
        train_config(tmp_path / "a", ["optim.max_epochs=2", "~callbacks.certification", "logger=none"])
    )
    resumed = train(
        train_config(
            tmp_path / "b",
            [
                "optim.max_epochs=3",
                "~callbacks.certification",
                "logger=none",
                f"ckpt_path={first['checkpoint']}",
            ],
        )
    )
    before = torch.load(first["checkpoint"], weights_only=True)
    after = torch.load(resumed["checkpoint"], weights_only=True)
    assert after["epoch"] == before["epoch"] + 1 and after["rs_lightning"]["sigma"] == 0.25
    assert after["global_step"] > before["global_step"]


def test_callback_command_args_are_certify_py_keys_and_carry_a_given_norm():
    """Catches: the callback's certify.py command built by hand beside the spec's protocol — a setting the
    callback certifies with but the command leaves out (a given norm, a sequential look schedule), or a
    key certify.py does not have (Hydra would refuse the override), or a null written as the string None."""
    from omegaconf import OmegaConf

    from rs_lightning.callbacks import CertificationCallback

    conf = OmegaConf.load(REPO / "conf" / "certify.yaml")
    callback = CertificationCallback(
        num_inputs=10, n=400, sampling="sequential", norm="linf", precision="bf16"
    )
    args = callback.certify_command_args(360)
    assert all(OmegaConf.select(conf, key, default="missing") != "missing" for key in args), args
    assert None not in args.values()
    assert args["norm"] == "linf" and args["sampling"] == "sequential" and args["precision"] == "bf16"
    assert args["sequential.growth"] == 1.5
    assert args["sequential.first_look"] == callback.spec.sampler.first_look
    assert (args["n"], args["n0"], args["alpha"], args["seed"]) == (400, 100, 0.001, 0)
    assert (args["start"], args["skip"], args["max"]) == (0, 36, 325)
    assert "norm" not in CertificationCallback(num_inputs=10).certify_command_args(360)  # the checkpoint's


def test_the_callback_defaults_to_lattice_noise_on_8_bit_data_as_certify_py_does():
    """The callback resolves its spec by the rule certify.py follows: a Gaussian-trained module on a data
    module that serves 8-bit inputs is certified with lattice noise, on the digits (off the grid) or a
    user's own data module without ``eight_bit`` with float noise, and a Laplace-trained module with its
    own. Catches the callback's numbers and its printed certify.py command certifying under different
    noises."""
    from types import SimpleNamespace

    from rs_lightning.callbacks import CertificationCallback
    from rs_lightning.data import DigitsDataModule, MNISTDataModule

    def noise(datamodule, trained="gaussian"):
        module = SimpleNamespace(model=torch.nn.Linear(4, 2), sigma=0.25, noise=trained)
        trainer = SimpleNamespace(datamodule=datamodule)
        return CertificationCallback(num_inputs=4, n=100)._spec(trainer, module).noise

    mnist = SimpleNamespace(eight_bit=MNISTDataModule.eight_bit, input_shape=(1, 28, 28))
    digits = SimpleNamespace(eight_bit=DigitsDataModule.eight_bit, input_shape=(1, 8, 8))
    assert noise(mnist) == "gaussian_lattice" and noise(mnist, "laplace") == "laplace"
    assert noise(digits) == "gaussian" and noise(SimpleNamespace(input_shape=(1, 8, 8))) == "gaussian"
