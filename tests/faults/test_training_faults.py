"""Long training jobs: a checkpoint every epoch, exact resume, non-finite losses, interrupts, W&B resume.

Each test names the defect it exists to catch.
"""

from __future__ import annotations

import csv
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from rs_testing import REPO, assert_one_line_error, run_script, train_config

from rs_lightning.cli.train import train
from rs_lightning.loggers import trained_batches
from rs_lightning.methods import NonFiniteLossError, NonFiniteWeightsError
from rs_lightning.validation import ConfigError

QUIET = ["~callbacks.certification", "logger=csv"]


def weights(path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True)["state_dict"]


def assert_same_weights(a, b) -> None:
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    differ = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"


def metric_rows(run_dir) -> list[dict]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


class FilesAtEpochStart(pl.Callback):
    def __init__(self, folder):
        self.folder, self.seen = folder, {}

    def on_train_epoch_start(self, trainer, pl_module):
        self.seen[trainer.current_epoch] = sorted(os.listdir(self.folder)) if self.folder.is_dir() else []


def test_last_checkpoint_is_written_after_every_epoch(tmp_path):
    """Catches: last.ckpt only at the end of training (save_top_k=0 + save_last), so a job killed in its
    last epoch had nothing to resume from."""
    probe = FilesAtEpochStart(tmp_path / "checkpoints")
    train(train_config(tmp_path, ["optim.max_epochs=3", *QUIET]), extra_callbacks=[probe])
    assert probe.seen[0] == []
    assert "last.ckpt" in probe.seen[1] and "last.ckpt" in probe.seen[2]
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3 * 23


def test_step_checkpoints_for_long_epochs(tmp_path):
    """callbacks.step_checkpoint.every_n_train_steps=K also writes last.ckpt every K steps, mid-epoch."""
    probe = FilesAtEpochStart(tmp_path / "checkpoints")
    overrides = ["optim.max_epochs=2", "callbacks.step_checkpoint.every_n_train_steps=10", *QUIET]
    train(train_config(tmp_path, overrides), extra_callbacks=[probe])
    assert "step00000020.ckpt" in probe.seen[1]  # written at step 20 of epoch 0's 23
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch001.ckpt", "last.ckpt", "step00000040.ckpt"]


@pytest.mark.parametrize("method", ["gaussian", "acr_gaming"])
def test_one_epoch_plus_resume_equals_two_epochs_bit_for_bit(tmp_path, method):
    """Catches: a resumed run drawing another data order (the global RNG that shuffles was not restored:
    all weights then differ) or another training noise; and metrics.csv losing its earlier rows."""
    common = [f"method={method}", *QUIET]
    if method == "acr_gaming":  # every trick on, at a tenth of the default work (the suite's time budget)
        common += ["method.num_noise_vec=2", "method.discard_samples=20", "method.attack_steps=1"]
    straight = train(train_config(tmp_path / "straight", ["optim.max_epochs=2", *common]))
    first = train(train_config(tmp_path / "split", ["optim.max_epochs=1", *common]))
    if method == "acr_gaming":  # the resume point carries a curated pool (E_ds = 0.4 of 1 epoch = epoch 0)
        curation = torch.load(first["checkpoint"], weights_only=True)["rs_lightning_acr_gaming_data"]
        assert curation["discarded"] and 0 < len(curation["subset"]) < 1437
    resumed = train(train_config(tmp_path / "split", ["optim.max_epochs=2", "ckpt_path=last", *common]))
    assert_same_weights(straight["checkpoint"], resumed["checkpoint"])
    a, b = (torch.load(p, weights_only=True) for p in (straight["checkpoint"], resumed["checkpoint"]))
    assert a["global_step"] == b["global_step"] and torch.equal(
        a["rs_lightning_noise_state"], b["rs_lightning_noise_state"]
    )
    rows_straight, rows_split = metric_rows(tmp_path / "straight"), metric_rows(tmp_path / "split")
    assert [r["epoch"] for r in rows_split] == [r["epoch"] for r in rows_straight]
    val = [r["val/acc_noisy"] for r in rows_split if r.get("val/acc_noisy")]
    assert val == [r["val/acc_noisy"] for r in rows_straight if r.get("val/acc_noisy")] and len(val) == 2


def test_resume_refuses_another_method_or_sigma_naming_the_difference(tmp_path):
    """Catches: resuming with sigma=0.5 or another method silently accepted and then recorded in the
    checkpoint, although most epochs ran with the old settings."""
    train(train_config(tmp_path, ["optim.max_epochs=1", *QUIET]))
    with pytest.raises(ConfigError, match=r"sigma: checkpoint 0.25, now 0.5"):
        train(train_config(tmp_path, ["optim.max_epochs=2", "ckpt_path=last", "sigma=0.5", *QUIET]))
    with pytest.raises(ConfigError, match=r"method\._target_: checkpoint .*GaussianAugmentation"):
        train(train_config(tmp_path, ["optim.max_epochs=2", "ckpt_path=last", "method=consistency", *QUIET]))
    with pytest.raises(ConfigError, match=r"^paths.output_dir=.*resume it with ckpt_path=last"):
        train(train_config(tmp_path, ["optim.max_epochs=2", *QUIET]))  # a new run would overwrite it


SLURM_JOB = {"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "7"}
"""What Lightning's SLURMEnvironment.detect() reads: a batch job (its auto-resume applies)."""


@pytest.fixture(scope="module")
def gaussian_checkpoint(tmp_path_factory) -> Path:
    """One epoch of gaussian, sigma 0.25, on the digits: the last.ckpt every resume case starts from."""
    out = tmp_path_factory.mktemp("gaussian")
    return Path(train(train_config(out, ["optim.max_epochs=1", "data.batch_size=256", *QUIET]))["checkpoint"])


def test_ckpt_path_hpc_is_checked_like_every_other_resume(tmp_path, gaussian_checkpoint):
    """Catches the hostile case: a Gaussian sigma=0.25 last.ckpt saved as hpc_ckpt_1.ckpt and resumed with
    ckpt_path=hpc, sigma=0.5, method=macer exited 0, and the new checkpoint recorded sigma 0.5 and MACER for
    weights trained under Gaussian noise at 0.25 (every certification of it then stated the wrong
    protocol): Lightning resolved 'hpc' itself, past the check that 'last' and paths got."""
    shutil.copy(gaussian_checkpoint, tmp_path / "hpc_ckpt_1.ckpt")
    done = run_script(
        "train.py",
        "optim.max_epochs=4",
        "sigma=0.5",
        "method=macer",
        f"hydra.run.dir={tmp_path}",
        "ckpt_path=hpc",
        "data.batch_size=256",
        *QUIET,
        timeout=300,
    )
    assert_one_line_error(done, "hpc_ckpt_1.ckpt", "method._target_: checkpoint", "GaussianAugmentation")
    assert not (tmp_path / "checkpoints").exists()
    common = [f"trainer.default_root_dir={tmp_path}", "data.batch_size=256", *QUIET]
    with pytest.raises(ConfigError, match=r"^paths.output_dir=.*resume it with ckpt_path=hpc"):
        train(train_config(tmp_path, ["optim.max_epochs=2", *common]))  # a new run would mix with it
    with pytest.raises(ConfigError, match=r"no hpc_ckpt_<N>.ckpt in .*empty"):
        train(train_config(tmp_path / "empty", ["optim.max_epochs=2", "ckpt_path=hpc"]))
    with pytest.raises(ConfigError, match=r"^ckpt_path='best' is invalid.*pass the checkpoint file's path"):
        train(train_config(tmp_path / "best", ["optim.max_epochs=2", "ckpt_path=best"]))
    resumed = train(train_config(tmp_path, ["optim.max_epochs=2", "ckpt_path=hpc", *common]))
    assert torch.load(resumed["checkpoint"], weights_only=True)["global_step"] == 2 * 6


def test_slurm_auto_resume_is_checked_and_takes_the_newer_checkpoint(
    tmp_path, gaussian_checkpoint, monkeypatch
):
    """Lightning resumes a SLURM job's hpc_ckpt_<N>.ckpt without being asked (ckpt_path unset): that resume
    is checked too (sigma 0.5 refused), and it takes the newer of hpc_ckpt and last.ckpt (catches a requeued
    job that went back to an older SLURM checkpoint although an interrupt wrote a later last.ckpt)."""
    for name, value in SLURM_JOB.items():
        monkeypatch.setenv(name, value)
    shutil.copy(gaussian_checkpoint, tmp_path / "hpc_ckpt_1.ckpt")
    common = [f"trainer.default_root_dir={tmp_path}", "data.batch_size=256", *QUIET]
    with pytest.raises(ConfigError, match=r"hpc_ckpt_1.ckpt.*sigma: checkpoint 0.25, now 0.5"):
        train(train_config(tmp_path, ["optim.max_epochs=2", "sigma=0.5", *common]))
    first = train(train_config(tmp_path, ["optim.max_epochs=2", *common]))  # writes a newer last.ckpt
    assert torch.load(first["checkpoint"], weights_only=True)["global_step"] == 12
    again = train(train_config(tmp_path, ["optim.max_epochs=3", *common]))  # from last.ckpt, not hpc_ckpt_1
    assert torch.load(again["checkpoint"], weights_only=True)["global_step"] == 18


def test_the_file_lightning_loads_is_checked_again(tmp_path, gaussian_checkpoint, monkeypatch):
    """The method's own check of whatever checkpoint Lightning restores: with train.py's check before the
    fit switched off, a resume with another sigma is still refused before any weight is restored (catches
    a way of resuming that train.py does not resolve, e.g. a new one in a later Lightning)."""
    import rs_lightning.cli.train as cli_train

    monkeypatch.setattr(cli_train, "check_resume_matches", lambda *args, **kwargs: None)
    with pytest.raises(ConfigError, match=r"sigma: checkpoint 0.25, now 0.5"):
        train(
            train_config(
                tmp_path,
                [
                    "optim.max_epochs=2",
                    "sigma=0.5",
                    f"ckpt_path={gaussian_checkpoint}",
                    "data.batch_size=256",
                    *QUIET,
                ],
            )
        )
    assert not (tmp_path / "checkpoints").exists()


def test_a_lower_max_epochs_on_resume_is_one_line_and_an_equal_one_is_done(tmp_path):
    """Catches: resuming a 2-epoch checkpoint with optim.max_epochs=1 ending in Lightning's
    MisconfigurationException traceback (exit 1); an equal one trains nothing and says so."""
    common = [f"hydra.run.dir={tmp_path}", "ckpt_path=last", "data.batch_size=256", *QUIET]
    train(train_config(tmp_path, ["optim.max_epochs=2", "data.batch_size=256", *QUIET]))
    done = run_script("train.py", "optim.max_epochs=1", *common, timeout=300)
    assert_one_line_error(done, "optim.max_epochs=1", ">= 2, the epochs", "last.ckpt has already trained")
    done = run_script("train.py", "optim.max_epochs=2", *common, timeout=300)
    assert done.returncode == 0 and "nothing left to train" in done.stdout, done.stderr[-2000:]
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 12


def test_a_pickle_payload_as_an_hpc_checkpoint_is_one_line_and_never_runs(tmp_path):
    """Catches: a pickled payload saved as hpc_ckpt_1.ckpt with ckpt_path=hpc ending in Lightning's
    UnpicklingError traceback (exit 1), and, worse, any code of it running."""
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    torch.save({"state_dict": {}, "rs_lightning": {}, "evil": Evil()}, tmp_path / "hpc_ckpt_1.ckpt")
    done = run_script("train.py", f"hydra.run.dir={tmp_path}", "ckpt_path=hpc", *QUIET, timeout=300)
    assert_one_line_error(done, "hpc_ckpt_1.ckpt", "system")
    assert not marker.exists()


def test_a_second_train_on_a_folder_in_use_is_refused_before_any_work(tmp_path):
    """Catches: two train.py with ckpt_path=last on one folder (a requeue racing a live job) both resuming
    from the same checkpoint and interleaving their checkpoints and CSV rows."""
    with (tmp_path / ".train.lock").open("a") as held:  # what a running train.py holds
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(ConfigError, match=r"^paths.output_dir=.*no other train.py is training in"):
            train(train_config(tmp_path, ["optim.max_epochs=1", "ckpt_path=last", *QUIET]))
        assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "csv").exists()
    result = train(train_config(tmp_path, ["optim.max_epochs=1", "ckpt_path=last", *QUIET]))  # released
    assert Path(result["checkpoint"]).is_file()
    train(train_config(tmp_path, ["optim.max_epochs=2", "ckpt_path=last", *QUIET]))  # lock ends with the run


def test_ckpt_path_last_without_a_checkpoint_starts_a_new_run(tmp_path, capsys):
    """A requeued job always passes ckpt_path=last; the first attempt has nothing to resume."""
    result = train(train_config(tmp_path, ["optim.max_epochs=1", "ckpt_path=last", *QUIET]))
    assert "starting a new run" in capsys.readouterr().out
    assert torch.load(result["checkpoint"], weights_only=True)["global_step"] == 23


class InjectNaN(pl.Callback):
    """Makes the method's loss NaN from (epoch, batch) on."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if (trainer.current_epoch, batch_idx) >= (self.epoch, self.batch) and not hasattr(pl_module, "_orig"):
            pl_module._orig = pl_module.training_loss
            pl_module.training_loss = lambda *a: pl_module._orig(*a) * float("nan")


def test_nan_loss_stops_with_the_message_and_keeps_the_last_good_checkpoint(tmp_path):
    """Catches: a NaN loss from step 9 on, the run exiting 0 and every weight in last.ckpt NaN."""
    with pytest.raises(NonFiniteLossError) as err:
        train(train_config(tmp_path, ["optim.max_epochs=3", *QUIET]), extra_callbacks=[InjectNaN(1, 5)])
    message = str(err.value)
    assert "training loss is nan at epoch 1, step 28" in message  # 23 steps per epoch on digits
    assert "method GaussianAugmentation" in message and re.search(r"last finite loss \d+\.\d+", message)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["epoch"] == 0 and all(bool(t.isfinite().all()) for t in last["state_dict"].values())
    assert_same_weights(tmp_path / "checkpoints" / "last.ckpt", tmp_path / "checkpoints" / "epoch000.ckpt")


def test_skip_policy_counts_skipped_steps_warns_and_keeps_training(tmp_path):
    with pytest.warns(
        UserWarning, match=r"epoch 1 \(method GaussianAugmentation, sigma 0.25\) skipped 3 of 23"
    ):
        result = train(
            train_config(
                tmp_path,
                ["optim.max_epochs=2", "on_nonfinite_loss=skip", "on_nonfinite_loss_max_share=0.2", *QUIET],
            ),
            extra_callbacks=[InjectNaN(1, 20)],  # the last 3 of epoch 1's 23 steps: 13 %, under 20 %
        )
    checkpoint = torch.load(result["checkpoint"], weights_only=True)
    assert checkpoint["rs_lightning_skipped_steps"] == 3
    assert all(bool(t.isfinite().all()) for t in checkpoint["state_dict"].values())
    assert result["metrics"]["train/skipped_steps"] == 3


def test_skip_policy_stops_a_run_that_skips_more_than_the_allowed_share(tmp_path):
    """Catches: 44 of 46 steps skipped, NaN validation, exit 0 and nothing printed — a dead
    run reported as finished, with a checkpoint of the dead epoch."""
    with pytest.raises(NonFiniteLossError) as err:
        train(
            train_config(tmp_path, ["optim.max_epochs=3", "on_nonfinite_loss=skip", *QUIET]),
            extra_callbacks=[InjectNaN(1, 5)],  # 18 of epoch 1's 23 steps
        )
    message = str(err.value)
    assert "epoch 1 (method GaussianAugmentation, sigma 0.25) skipped 18 of 23 steps (78%)" in message
    assert "more than on_nonfinite_loss_max_share=0.1" in message
    assert f"the last checkpoint written is {tmp_path / 'checkpoints' / 'last.ckpt'}" in message
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


def test_a_dead_run_exits_non_zero_with_one_line(tmp_path):
    """The issue's case: a learning rate that blows the loss up in most steps. train.py stops at the end of
    epoch 0 with one line naming the skipped share, status 2, and no checkpoint from the dead epoch."""
    done = run_script(
        "train.py",
        "on_nonfinite_loss=skip",
        "optim.optimizer.lr=1000",
        "optim.max_epochs=3",
        f"hydra.run.dir={tmp_path}",
        "~callbacks.certification",
        "trainer.enable_progress_bar=false",
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]  # after Lightning's own start-up lines
    assert line.startswith("error: epoch 0 (method GaussianAugmentation, sigma 0.25) skipped ")
    assert "the run has diverged" in line
    assert "no checkpoint was written yet" in line and "last.ckpt holds" not in line
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


def test_non_finite_validation_stops_under_either_policy(tmp_path):
    """Weights of 1e30 are finite (so the weight check passes) but the logits are not."""

    class Overflow(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.current_epoch == 1 and batch_idx == 22:
                with torch.no_grad():
                    for p in pl_module.parameters():
                        p.fill_(1e30)

    with pytest.raises(
        NonFiniteLossError, match="validation at epoch 1 gave non-finite logits on 360 inputs"
    ):
        train(train_config(tmp_path, ["optim.max_epochs=3", *QUIET]), extra_callbacks=[Overflow()])
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


def test_divergence_in_the_first_epoch_does_not_promise_a_checkpoint(tmp_path):
    """The message once said 'checkpoints/last.ckpt holds the last good epoch' with none there."""
    with pytest.raises(NonFiniteLossError) as err:
        train(train_config(tmp_path, ["optim.max_epochs=2", *QUIET]), extra_callbacks=[InjectNaN(0, 3)])
    assert "no checkpoint was written yet" in str(err.value) and "holds" not in str(err.value)
    assert not (tmp_path / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize("share", ["-0.1", "1.5", "nan", "abc"])
def test_bad_max_share_is_refused_before_any_work(tmp_path, share):
    with pytest.raises(ConfigError, match="on_nonfinite_loss_max_share"):
        train(train_config(tmp_path, [f"on_nonfinite_loss_max_share={share}", *QUIET]))
    assert not (tmp_path / "checkpoints").exists()


def test_a_checkpoint_is_never_written_from_non_finite_weights(tmp_path):
    """Catches: a later checkpoint (every K steps, Ctrl-C) overwriting the last good one with NaN weights."""

    class PoisonAtEpochEnd(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                with torch.no_grad():
                    next(pl_module.parameters()).fill_(float("nan"))

    with pytest.raises(NonFiniteWeightsError, match="are non-finite at epoch 1"):
        train(train_config(tmp_path, ["optim.max_epochs=3", *QUIET]), extra_callbacks=[PoisonAtEpochEnd()])
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 0


def test_noise_state_is_applied_on_the_device_the_module_is_on(tmp_path):
    """Catches: the training-noise state set at load time (before Lightning moves the module to its device)
    and then rebuilt from the seed on that device. Here the generator that exists at load time is dropped
    and the saved state is applied when the generator is next created (on CPU: no GPU on this machine)."""
    from rs_lightning.methods import GaussianAugmentation

    make = lambda: GaussianAugmentation(torch.nn.Linear(2, 2), 0.25, torch.optim.SGD)  # noqa: E731
    saved = make()
    saved.noise_generator.manual_seed(123)
    saved.training_noise(torch.zeros(5))
    state = saved.noise_generator.get_state()
    restored = make()
    _ = restored.noise_generator  # created before the checkpoint is loaded, as in Lightning
    restored.on_load_checkpoint({"rs_lightning_noise_state": state})
    assert restored._train_generator is None  # created anew on the module's device when first used
    assert torch.equal(restored.training_noise(torch.zeros(7)), saved.training_noise(torch.zeros(7)))


def test_wandb_resume_keeps_the_run_id_and_the_csv_log(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    common = ["~callbacks.certification", "logger=wandb", "logger.wandb.name=test"]
    first = train(train_config(tmp_path, ["optim.max_epochs=1", *common]))
    run_id = torch.load(first["checkpoint"], weights_only=True)["rs_lightning"]["wandb_run_id"]
    train(train_config(tmp_path, ["optim.max_epochs=2", "ckpt_path=last", *common]))
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))  # a folder each (W&B adds -1 within a second)
    assert len(runs) == 2 and all((run / f"run-{run_id}.wandb").is_file() for run in runs), runs
    assert sum(1 for r in metric_rows(tmp_path) if r.get("val/acc_noisy")) == 2


def _train_cli(run_dir, *overrides) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = [
        sys.executable,
        str(REPO / "train.py"),
        f"hydra.run.dir={run_dir}",
        "~callbacks.certification",
        "logger=csv",
        "trainer.enable_progress_bar=false",
        "data.batch_size=8",
        *overrides,
    ]
    with open(f"{run_dir}.log", "a") as log:  # a file, not a pipe: a full pipe would block the run
        return subprocess.Popen(
            args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=_reset_sigint
        )


def _wait_for(path, timeout=240.0) -> None:
    deadline = time.time() + timeout
    while not path.exists():
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_kill_9_mid_epoch_then_resume_equals_an_uninterrupted_run(tmp_path):
    """Catches: nothing to resume from after a hard kill, an epoch repeated or skipped on resume, or a
    resumed run that differs from an uninterrupted one."""
    straight = _train_cli(tmp_path / "straight", "optim.max_epochs=3")
    assert straight.wait(timeout=600) == 0, Path(f"{tmp_path / 'straight'}.log").read_text()[-2000:]
    job = _train_cli(tmp_path / "killed", "optim.max_epochs=3")
    _wait_for(tmp_path / "killed" / "checkpoints" / "epoch000.ckpt")
    time.sleep(0.5)  # into epoch 1 (180 steps of batch 8 per epoch)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    assert torch.load(tmp_path / "killed" / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] < 2
    resumed = _train_cli(tmp_path / "killed", "optim.max_epochs=3", "ckpt_path=last")
    assert resumed.wait(timeout=600) == 0, "see the run's .log"
    assert_same_weights(
        tmp_path / "straight/checkpoints/last.ckpt", tmp_path / "killed/checkpoints/last.ckpt"
    )
    epochs = [r["epoch"] for r in metric_rows(tmp_path / "killed") if r.get("val/acc_noisy")]
    assert epochs == ["0", "1", "2"]


class SignalAfterStep(pl.Callback):
    """Sends this process ``signum`` right after optimizer step ``at`` (global step count), inside the
    training step: Lightning has counted the step but not yet the batch. There Python's own Ctrl-C raised
    KeyboardInterrupt and the checkpoint repeated the batch on resume (541 steps for 540); a stop noted at
    the next batch's start left the loop counters one batch apart (a resume then logged every later step
    one too high)."""

    def __init__(self, at: int, signum: int = signal.SIGINT) -> None:
        self.at, self.signum = at, signum

    def on_train_start(self, trainer, pl_module) -> None:
        after_step = pl_module.after_optimizer_step

        def and_signal() -> None:
            after_step()
            if trainer.global_step == self.at:
                os.kill(os.getpid(), self.signum)

        pl_module.after_optimizer_step = and_signal


@contextmanager
def terminal_ctrl_c():
    """SIGINT as in a terminal (pytest may run with it ignored, e.g. as a background job)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def logged_steps(run_dir) -> list[tuple[str, str, list[str]]]:
    """(epoch, step, the metrics logged) of every row of metrics.csv."""
    return [(r["epoch"], r["step"], sorted(k for k, v in r.items() if v)) for r in metric_rows(run_dir)]


def loop_counts(path) -> tuple[int, int]:
    """A checkpoint's optimizer steps and Lightning's count of stepped batches (the step loggers use)."""
    checkpoint = torch.load(path, weights_only=True)
    return checkpoint["global_step"], trained_batches(checkpoint)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_step_checkpoints_that_step_and_the_resume_equals_a_straight_run(tmp_path, signum):
    """Catches: a preempted (SIGTERM) or Ctrl-C'd run exiting 0 (Lightning's SIGTERMException is a
    SystemExit(None)) or 1, so job scripts take it for finished or failed; the work since the last epoch
    lost; and a resume off by one batch: the checkpoint must hold exactly the steps taken, and the resumed
    run the straight run's steps, stepped-batch count and log rows at the same steps (a stop noted at the
    next batch's start gave 2157 steps with 2158 stepped batches, validation logged at steps 1438/2157 for
    1437/2156; a stop at the step's end lost that step's log row)."""
    overrides = ["optim.max_epochs=3", "data.batch_size=64", "trainer.log_every_n_steps=5", *QUIET]
    with terminal_ctrl_c(), pytest.raises(SystemExit) as stop:  # 23 steps an epoch; step 30 is logged
        train(train_config(tmp_path / "stopped", overrides), extra_callbacks=[SignalAfterStep(30, signum)])
    assert stop.value.code == 128 + signum
    assert loop_counts(tmp_path / "stopped" / "checkpoints" / "last.ckpt")[0] == 30
    resumed = train(train_config(tmp_path / "stopped", [*overrides, "ckpt_path=last"]))
    straight = train(train_config(tmp_path / "straight", overrides))
    assert loop_counts(resumed["checkpoint"]) == loop_counts(straight["checkpoint"]) == (69, 69)
    assert logged_steps(tmp_path / "stopped") == logged_steps(tmp_path / "straight")
    validated = [e for e, _, metrics in logged_steps(tmp_path / "straight") if "val/acc_noisy" in metrics]
    assert validated == ["0", "1", "2"]


def test_a_mid_epoch_sigterm_resume_has_the_straight_runs_weights(tmp_path):
    """The bit-for-bit half of the resume contract for a checkpoint taken mid-epoch. Caught: the rest of
    the interrupted epoch came in another order (Lightning restarts a plain loader, whose shuffle drew a
    new seed from the global RNG the checkpoint had restored to mid-epoch) and the loader's worker seed
    draw moved the global RNG one step past the uninterrupted run's."""
    overrides = ["optim.max_epochs=2", "data.batch_size=64", *QUIET]
    with pytest.raises(SystemExit):
        train(
            train_config(tmp_path / "stopped", overrides),
            extra_callbacks=[SignalAfterStep(30, signal.SIGTERM)],
        )
    resumed = train(train_config(tmp_path / "stopped", [*overrides, "ckpt_path=last"]))
    straight = train(train_config(tmp_path / "straight", overrides))
    assert_same_weights(straight["checkpoint"], resumed["checkpoint"])


def test_a_resume_from_a_step_checkpoint_inside_an_epoch_has_the_straight_runs_weights(tmp_path):
    """Catches: a resume from ``every_n_train_steps``'s checkpoint (step 30 of 46, in epoch 1) that
    repeats or reorders that epoch's batches; the copy of the finished run goes on from the step file."""
    steps = "callbacks.step_checkpoint.every_n_train_steps=30"
    overrides = ["optim.max_epochs=2", "data.batch_size=64", steps, *QUIET]
    straight = train(train_config(tmp_path / "straight", overrides))
    shutil.copytree(tmp_path / "straight", tmp_path / "again")
    step_file = tmp_path / "again" / "checkpoints" / "step00000030.ckpt"
    assert torch.load(step_file, weights_only=True)["DigitsDataModule"]["train_batches_done"] == 7
    resumed = train(train_config(tmp_path / "again", [*overrides, f"ckpt_path={step_file}"]))
    assert_same_weights(straight["checkpoint"], resumed["checkpoint"])


def test_a_signal_at_an_epoch_end_resumes_exactly_too(tmp_path):
    """A signal in the last step of an epoch: Lightning resumes a checkpoint taken there without that epoch's
    validation (caught: the resumed run lacked epoch 0's validation row), so the stop comes one step later
    (step 24, after the epoch-end checkpoint), and the resume runs everything once."""
    overrides = ["optim.max_epochs=2", "data.batch_size=64", *QUIET]
    with terminal_ctrl_c(), pytest.raises(SystemExit):
        train(train_config(tmp_path / "stopped", overrides), extra_callbacks=[SignalAfterStep(23)])
    assert loop_counts(tmp_path / "stopped" / "checkpoints" / "last.ckpt")[0] == 24
    resumed = train(train_config(tmp_path / "stopped", [*overrides, "ckpt_path=last"]))
    straight = train(train_config(tmp_path / "straight", overrides))
    assert loop_counts(resumed["checkpoint"]) == loop_counts(straight["checkpoint"])
    assert logged_steps(tmp_path / "stopped") == logged_steps(tmp_path / "straight")


def test_a_signal_after_the_last_step_still_ends_the_run_as_interrupted(tmp_path):
    """Ctrl-C during the last training step: only the epoch's validation (or nothing) follows, and the run
    must still end as interrupted (status 130), never as a finished training (status 0) that a job script
    would go on from."""
    overrides = ["optim.max_epochs=1", "data.batch_size=256", *QUIET]  # 6 steps on the digits
    with terminal_ctrl_c(), pytest.raises(SystemExit) as stop:
        train(train_config(tmp_path, overrides), extra_callbacks=[SignalAfterStep(at=6)])
    assert stop.value.code == 130


class CtrlCTwice(pl.Callback):
    """Two Ctrl-C inside one training step."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == 30:
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)


def test_a_second_ctrl_c_stops_at_once_and_keeps_the_last_good_checkpoint(tmp_path):
    """Catches: a second Ctrl-C ignored (a user who wants out must wait), or a checkpoint written from the
    state in the middle of a step, which a resume would repeat in part; the last epoch's stays."""
    overrides = ["optim.max_epochs=3", "data.batch_size=64", *QUIET]
    with terminal_ctrl_c(), pytest.raises(SystemExit) as stop:
        train(train_config(tmp_path, overrides), extra_callbacks=[CtrlCTwice()])
    assert stop.value.code == 130
    assert loop_counts(tmp_path / "checkpoints" / "last.ckpt") == (23, 23)  # epoch 0's


def test_a_finished_or_failed_fit_gives_the_signals_back(tmp_path):
    """The stop handlers are the fit's only: after a fit that finished, and after one that stopped on a
    non-finite loss, SIGINT raises KeyboardInterrupt and SIGTERM has its earlier handler again (catches a
    handler left behind, under which a notebook's or script's next Ctrl-C would only print a message)."""
    with terminal_ctrl_c():
        before = signal.getsignal(signal.SIGTERM)
        train(train_config(tmp_path / "ok", ["optim.max_epochs=1", "data.batch_size=256", *QUIET]))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is before
        with pytest.raises(NonFiniteLossError):
            train(
                train_config(tmp_path / "nan", ["optim.max_epochs=2", "data.batch_size=256", *QUIET]),
                extra_callbacks=[InjectNaN(1, 0)],
            )
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        assert signal.getsignal(signal.SIGTERM) is before


def _reset_sigint() -> None:
    """A job started with `&` from a non-interactive shell ignores SIGINT, and so does every process it
    starts (train.py then never sees the test's Ctrl-C: exit status 0); a terminal's Ctrl-C is the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_ctrl_c_writes_a_checkpoint_to_resume_from(tmp_path):
    job = _train_cli(tmp_path, "optim.max_epochs=3")
    _wait_for(tmp_path / "checkpoints" / "epoch000.ckpt")
    time.sleep(0.5)
    job.send_signal(signal.SIGINT)
    assert job.wait(timeout=120) != 0
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    # the state at the interrupt, after epoch 0's 180 steps (epoch000.ckpt itself may already have been
    # replaced by epoch001.ckpt on a fast machine: save_top_k keeps one epoch checkpoint)
    assert last["global_step"] > 180
    resumed = _train_cli(tmp_path, "optim.max_epochs=3", "ckpt_path=last")
    assert resumed.wait(timeout=600) == 0, "see the run's .log"
    final = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert final["global_step"] == 3 * 180  # every step once: no epoch repeated or cut short


def test_wandb_gets_the_full_resolved_config_and_the_configured_project(tmp_path, monkeypatch):
    """The run config is the whole resolved Hydra config (not just the method's hyperparameters)."""
    from lightning.pytorch.loggers import WandbLogger
    from omegaconf import OmegaConf

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    logged = []
    monkeypatch.setattr(WandbLogger, "log_hyperparams", lambda self, params: logged.append((self, params)))
    overrides = [
        "optim.max_epochs=1",
        "~callbacks.certification",
        "logger=wandb",
        "logger.wandb.name=t",
        "logger.wandb.group=g1",
        "logger.wandb.tags=[a,b]",
    ]
    cfg = train_config(tmp_path, overrides)
    train(cfg)
    (logger, params), *_ = logged
    assert params == OmegaConf.to_container(cfg, resolve=True)
    assert logger._wandb_init["group"] == "g1" and list(logger._wandb_init["tags"]) == ["a", "b"]


def test_an_error_raised_in_a_spawned_rank_is_one_line():
    """ddp_spawn hands a rank's exception back as torch's ProcessRaisedException (a traceback as text):
    the user error at its end is printed as one line, anything else stays a traceback."""
    from torch.multiprocessing.spawn import ProcessRaisedException

    from rs_lightning.cli.common import user_error

    text = (
        "\n\n-- Process 1 terminated with the following error:\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "rs_lightning.methods.faults.NonFiniteLossError: epoch 0 (method M, sigma 0.25) skipped 19 of 23 "
        "steps (83%) ...\n"
    )
    found = user_error(ProcessRaisedException(text, 1, 123))
    assert str(found) == "epoch 0 (method M, sigma 0.25) skipped 19 of 23 steps (83%) ..."
    assert user_error(ProcessRaisedException("Traceback ...\nKeyError: 'x'\n", 0, 1)) is None


@pytest.mark.slow
def test_a_dead_run_under_ddp_sim_stops_every_rank_with_one_line(tmp_path):
    """Both ranks sum their counts (skipped steps, non-finite validation logits) and take one decision; the
    launcher prints one line, status 2 (was: status 1 and two tracebacks)."""
    done = run_script(
        "train.py",
        "trainer=ddp_sim",
        "on_nonfinite_loss=skip",
        "optim.optimizer.lr=1000",
        "optim.max_epochs=2",
        f"hydra.run.dir={tmp_path}",
        "~callbacks.certification",
        "trainer.enable_progress_bar=false",
        timeout=600,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "epoch 0" in line and "the run has diverged" in line
