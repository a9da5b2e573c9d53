"""Long training jobs: a checkpoint every epoch, exact resume, non-finite losses, interrupts, W&B resume.

Issue 9 ("Faults"): each test names the defect it exists to catch.
"""

from __future__ import annotations

import csv
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch
from rs_testing import REPO, run_script, train_config

from rs_lightning.cli.train import train
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


class SendSigterm(pl.Callback):
    """Sends SIGTERM to this process (what a cluster does on preemption) at (epoch, batch)."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if (trainer.current_epoch, batch_idx) == (self.epoch, self.batch):
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_writes_a_checkpoint_exits_143_and_resumes_every_step_once(tmp_path):
    """Catches: a preempted (SIGTERM) run exiting with status 0 (Lightning's SIGTERMException is a
    SystemExit(None)), so job scripts mark it finished (mnist_common.sh writes train.done) and certify a
    half-trained model; and the work since the last epoch end lost (no checkpoint at the interrupt)."""
    overrides = ["optim.max_epochs=3", "ckpt_path=last", *QUIET]
    with pytest.raises(SystemExit) as stop:
        train(train_config(tmp_path, overrides), extra_callbacks=[SendSigterm(epoch=1, batch=4)])
    assert stop.value.code == 143
    # Lightning raises before the next batch: 23 steps of epoch 0, then batches 0-4 of epoch 1
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 23 + 5
    result = train(train_config(tmp_path, overrides))
    assert torch.load(result["checkpoint"], weights_only=True)["global_step"] == 3 * 23


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
    """Issue 22 item 4. Catches: 44 of 46 steps skipped, NaN validation, exit 0 and nothing printed — a dead
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
        "train.py", "on_nonfinite_loss=skip", "optim.optimizer.lr=1000", "optim.max_epochs=3",
        f"hydra.run.dir={tmp_path}", "~callbacks.certification", "trainer.enable_progress_bar=false",
    )  # fmt: skip
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
    """Issue 22 item 5: the message said 'checkpoints/last.ckpt holds the last good epoch' with none there."""
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
        sys.executable, str(REPO / "train.py"), f"hydra.run.dir={run_dir}", "~callbacks.certification",
        "logger=csv", "trainer.enable_progress_bar=false", "data.batch_size=8", *overrides,
    ]  # fmt: skip
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


class CtrlCAfterStep(pl.Callback):
    """Sends this process SIGINT right after optimizer step ``at`` (global step count), inside the training
    step: Lightning has counted the step but not yet the batch, where Python's own handler raised
    KeyboardInterrupt and the checkpoint repeated the batch (and its step) on resume."""

    def __init__(self, at: int) -> None:
        self.at = at

    def on_train_start(self, trainer, pl_module) -> None:
        after_step = pl_module.after_optimizer_step

        def and_ctrl_c() -> None:
            after_step()
            if trainer.global_step == self.at:
                os.kill(os.getpid(), signal.SIGINT)

        pl_module.after_optimizer_step = and_ctrl_c


def test_ctrl_c_after_an_optimizer_step_stops_at_the_next_batch_and_resume_does_every_step_once(tmp_path):
    """Catches the race the slow Ctrl-C test below hit about once in eight runs under load (541 steps for
    540): a KeyboardInterrupt after a batch's optimizer step but before the batch counted as completed. The
    interrupt must stop at the next batch boundary, the checkpoint hold exactly the steps taken, and the
    resumed run take every step of the schedule once."""
    overrides = ["optim.max_epochs=1", "data.batch_size=64", *QUIET]
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.raises(SystemExit) as stop:  # Lightning: "Detected KeyboardInterrupt", exit(1)
            train(train_config(tmp_path, overrides), extra_callbacks=[CtrlCAfterStep(at=7)])
        assert stop.value.code == 1
    finally:
        signal.signal(signal.SIGINT, previous)
    assert torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 7
    resumed = train(train_config(tmp_path, [*overrides, "ckpt_path=last"]))
    straight = train(train_config(tmp_path / "straight", overrides))
    steps = [torch.load(r["checkpoint"], weights_only=True)["global_step"] for r in (resumed, straight)]
    assert steps[0] == steps[1] > 7


def test_ctrl_c_after_the_last_step_still_ends_the_run_as_interrupted(tmp_path):
    """Ctrl-C during the last training step: only the epoch's validation (or nothing) follows, and the run
    must still end as interrupted (status 1), never as a finished training (status 0) that a job script
    would go on from."""
    overrides = ["optim.max_epochs=1", "data.batch_size=256", *QUIET]  # 6 steps on the digits
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(SystemExit) as stop:
            train(train_config(tmp_path, overrides), extra_callbacks=[CtrlCAfterStep(at=6)])
        assert stop.value.code == 1
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_finished_or_failed_fit_gives_ctrl_c_back(tmp_path):
    """The deferred Ctrl-C handler is the fit's only: after a fit that finished, and after one that stopped
    on a non-finite loss, SIGINT raises KeyboardInterrupt again (catches a handler left behind, under which
    a notebook's or script's next Ctrl-C would only print a message)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        train(train_config(tmp_path / "ok", ["optim.max_epochs=1", "data.batch_size=256", *QUIET]))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        with pytest.raises(NonFiniteLossError):
            train(
                train_config(tmp_path / "nan", ["optim.max_epochs=2", "data.batch_size=256", *QUIET]),
                extra_callbacks=[InjectNaN(1, 0)],
            )
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


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
    overrides = ["optim.max_epochs=1", "~callbacks.certification", "logger=wandb", "logger.wandb.name=t",
                 "logger.wandb.group=g1", "logger.wandb.tags=[a,b]"]  # fmt: skip
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
        "train.py", "trainer=ddp_sim", "on_nonfinite_loss=skip", "optim.optimizer.lr=1000",
        "optim.max_epochs=2", f"hydra.run.dir={tmp_path}", "~callbacks.certification",
        "trainer.enable_progress_bar=false", timeout=600,
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "epoch 0" in line and "the run has diverged" in line
