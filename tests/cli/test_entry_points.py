"""train.py / certify.py as users run them: one-line errors, Hydra's choice listing, loggers, DDP on CPU."""

import subprocess
import sys

import pytest
from rs_testing import REPO, certify_config, train_config

from rs_lightning.callbacks import CertificationCallback
from rs_lightning.cli.certify import certify
from rs_lightning.cli.train import train


def run(script: str, *overrides: str, cwd=REPO, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO / script), *overrides],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_certify_cli_reports_user_errors_in_one_line(tmp_path):
    done = run("certify.py", f"checkpoint={tmp_path}/missing.ckpt", f"hydra.run.dir={tmp_path}/out")
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: checkpoint=") and "does not exist" in done.stderr
    assert "Traceback" not in done.stderr
    done = run(
        "certify.py", f"checkpoint={tmp_path}/missing.ckpt", "alpha=2", f"hydra.run.dir={tmp_path}/out"
    )
    assert (
        done.returncode == 2
        and "error: alpha=2 is invalid: alpha must be in the open interval (0, 1)" in done.stderr
    )


def test_train_cli_errors(tmp_path):
    done = run("train.py", "sigma=-1", f"hydra.run.dir={tmp_path}")
    assert done.returncode == 2 and "error: sigma=-1 is invalid: sigma must be > 0" in done.stderr
    done = run("train.py", "method=nope", f"hydra.run.dir={tmp_path}")
    assert done.returncode != 0
    assert "Could not find 'method/nope'" in done.stderr and "gaussian" in done.stderr


def test_wandb_offline_and_tensorboard_receive_the_metrics_and_ecdf_figure(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    result = train(train_config(tmp_path, ["logger=many", "debug=quick", "logger.wandb.name=test"]))
    assert "val/acr" in result["metrics"]
    events = list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(events[0].parent), size_guidance={"images": 0, "scalars": 0})
    accumulator.Reload()
    assert "val/acr" in accumulator.Tags()["scalars"] and "val/pa_ecdf" in accumulator.Tags()["images"]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert runs and list(runs[0].glob("*.wandb")), "no offline W&B run"
    assert list((tmp_path / "csv" / "pa_ecdf").glob("epoch_*.png"))


def test_ddp_on_two_cpu_processes(tmp_path):
    """trainer=ddp_sim: 2 gloo processes; the callback splits its subset across ranks and gathers the
    torchmetrics states, so its numbers equal a single-process certify.py run of the same checkpoint."""
    result = train(train_config(tmp_path, ["trainer=ddp_sim", "debug=quick", "logger=csv"]))
    checkpoint = tmp_path / "checkpoints" / "last.ckpt"
    assert result["checkpoint"] == str(checkpoint)  # was "" once (the spawned ranks kept the path)
    args = CertificationCallback(num_inputs=10).certify_command_args(360)
    summary = certify(certify_config(tmp_path / "certify", checkpoint, [f"{k}={v}" for k, v in args.items()]))
    assert summary["num_inputs"] == 10
    assert result["metrics"]["val/acr"] == pytest.approx(summary["acr"], abs=1e-6)
    assert result["metrics"]["val/pa_mean"] == pytest.approx(summary["pa_mean"], abs=1e-6)
    assert result["metrics"]["val/certified_accuracy@0"] == pytest.approx(summary["clean_accuracy"], abs=1e-6)


@pytest.mark.slow
def test_demo_defaults_run_from_the_command_line(tmp_path):
    done = run("train.py", f"hydra.run.dir={tmp_path}/train")
    assert done.returncode == 0, done.stderr[-2000:]
    done = run(
        "certify.py",
        f"checkpoint={tmp_path}/train/checkpoints/last.ckpt",
        "n=10000",
        f"hydra.run.dir={tmp_path}/certify",
        timeout=1200,  # 360 inputs at n = 10,000: 2 min alone, over 5 beside make test-all's other worker
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ACR" in done.stdout
