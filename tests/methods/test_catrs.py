"""CAT-RS (Jeong, Kim & Shin, AAAI 2023): loss vs. formula, bottom-K, noise attack, soft labels, CLI."""

import functools
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from omegaconf import open_dict
from rs_testing import REPO, compose_config, train_config
from torch import nn

from rs_lightning.attacks import noise_space
from rs_lightning.cli.soft_labels import soft_labels
from rs_lightning.cli.train import train
from rs_lightning.data import DigitsDataModule
from rs_lightning.methods.catrs import CATRS
from rs_lightning.models import DigitsCNN, build_classifier
from rs_lightning.validation import ConfigError

B, M, K_CLASSES, SHAPE = 4, 4, 10, (1, 8, 8)


def _linear(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, K_CLASSES))


def _method(model=None, **kwargs) -> CATRS:
    kwargs = {"num_noise_vec": M, "epsilon": 0.5, "num_steps": 3, "lbd": 0.7, **kwargs}
    return CATRS(
        model=model if model is not None else _linear(),
        sigma=0.25,
        optimizer=functools.partial(torch.optim.SGD, lr=0.01),
        **kwargs,
    )


def _batch(seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(B, *SHAPE, generator=gen)
    y = torch.randint(0, K_CLASSES, (B,), generator=gen)
    noise = 0.25 * torch.randn(B * M, *SHAPE, generator=gen)  # image-major: row b*M + i
    return x, y, noise


def _soft_file(tmp_path, rows: int, classes: int = K_CLASSES, seed: int = 0):
    p = np.random.default_rng(seed).dirichlet(np.ones(classes), size=rows).astype(np.float32)
    path = tmp_path / f"soft_{rows}x{classes}.npy"
    np.save(path, p)
    return path, p


def _copies(noise):
    """The method's ``(M, B, ...)`` view of image-major draws (row b*M + i is copy i of image b)."""
    return noise.view(B, M, *SHAPE).transpose(0, 1)


def _fix(method, noise, k):
    """Fixed noise draws and a fixed Binomial outcome K."""
    method.training_noise = lambda like, generator=None: _copies(noise)
    method.sample_k = lambda p_hat: torch.as_tensor(k)


# ---------------------------------------------------------------- the paper's formula, written out here
def _kl(p, logits):
    q = torch.softmax(logits, dim=-1)
    return sum(p[c] * (math.log(p[c]) - torch.log(q[c])) for c in range(len(p)) if p[c] > 0)


def _expected_loss(model, x, y, p, noise, k, lam, eps, steps):
    """mean_b [ (1/M) Σ_{j<=K_b} ce_(j),b + λ 1[K_b=M] max_i KL(p_b ‖ softmax f(x_b + δ*_i)) ], δ* from
    T steps of δ += (2ε/T) g/(‖g‖+1e-8), δ−δ0 onto the ε-ball, δ ← μ0 + (δ − mean δ)·s0/RMS(δ) (KL_PGD)."""
    total = 0.0
    for b in range(len(x)):
        kb = max(int(k[b]), 1)
        d0 = [noise[b * M + i] for i in range(M)]
        ce = sorted(F.cross_entropy(model((x[b] + d)[None]), y[b : b + 1]).item() for d in d0)
        low = sum(ce[:kb]) / M
        high = 0.0
        if kb == M:
            worst = []
            for i in range(M):
                mu0, s0 = d0[i].mean(), d0[i].pow(2).mean().sqrt()
                d = d0[i].clone()
                for _ in range(steps):
                    d.requires_grad_(True)
                    (g,) = torch.autograd.grad(_kl(p[b], model((x[b] + d)[None])[0]) / M, d)
                    d = d.detach() + (2 * eps / steps) * g / (g.norm() + 1e-8)
                    e = d - d0[i]
                    d = d0[i] + (e * eps / e.norm() if e.norm() > eps else e)
                    d = mu0 + (d - d.mean()) * s0 / d.pow(2).mean().sqrt()
                worst.append(_kl(p[b], model((x[b] + d)[None])[0]).item())
            high = max(worst)
        total += low + lam * (kb == M) * high
    return total / len(x)


@pytest.mark.parametrize("k", [[0, 2, 4, 4], [4, 1, 3, 4]])
def test_loss_equals_the_formula_with_soft_labels(tmp_path, k):
    x, y, noise = _batch()
    path, p = _soft_file(tmp_path, rows=10)
    index = torch.tensor([3, 7, 0, 9])
    method = _method(soft_labels=str(path))
    method.attach_soft_labels(10, K_CLASSES)
    _fix(method, noise, k)
    loss = method.training_loss(x, y, index)
    p_rows = [[float(v) for v in p[i]] for i in index.tolist()]
    expected = _expected_loss(method.model, x, y, p_rows, noise, k, lam=0.7, eps=0.5, steps=3)
    assert loss.item() == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_without_soft_labels_the_target_is_one_hot():
    """Our documented fallback (not the paper): p_b = one-hot(y), so KL(p_b ‖ q) = CE."""
    x, y, noise = _batch(2)
    method = _method()
    _fix(method, noise, [4, 4, 2, 4])
    onehot = [[1.0 if c == int(y[b]) else 0.0 for c in range(K_CLASSES)] for b in range(B)]
    expected = _expected_loss(method.model, x, y, onehot, noise, [4, 4, 2, 4], lam=0.7, eps=0.5, steps=3)
    assert method.training_loss(x, y, None).item() == pytest.approx(expected, rel=1e-5)


def test_bottom_k_divides_by_m_and_the_binomial_probability_is_the_noisy_accuracy():
    x, y, noise = _batch(3)
    method = _method(lbd=0.0)
    seen = {}

    def sample_k(p_hat):
        seen["p_hat"] = p_hat.clone()
        return torch.tensor([1, 2, 3, 0])

    method.training_noise = lambda like, generator=None: _copies(noise)
    method.sample_k = sample_k
    loss = method.training_loss(x, y, None)
    with torch.no_grad():
        logits = method.model(x.repeat_interleave(M, 0) + noise).view(B, M, -1)
        ce = F.cross_entropy(logits.flatten(0, 1), y.repeat_interleave(M), reduction="none").view(B, M)
    smallest = ce.sort(dim=1).values
    expected = smallest[0, :1].sum() + smallest[1, :2].sum() + smallest[2, :3].sum() + smallest[3, :1].sum()
    assert loss.item() == pytest.approx(float(expected) / M / B, rel=1e-6)  # K=0 -> 1; divided by M, not K
    accuracy = (logits.argmax(-1) == y[:, None]).float().mean(1)
    assert torch.equal(seen["p_hat"], accuracy)


def test_gradient_flows_only_into_the_selected_copies_and_not_through_the_attack():
    x, y, noise = _batch(4)
    noise = noise.clone().requires_grad_(True)
    method = _method()
    _fix(method, noise, [1, 2, 4, 3])
    loss = method.training_loss(x, y, None)
    loss.backward()
    with torch.no_grad():
        ce = F.cross_entropy(
            method.model(x.repeat_interleave(M, 0) + noise), y.repeat_interleave(M), reduction="none"
        )
    order = ce.view(B, M).argsort(dim=1)
    grad_norm = noise.grad.flatten(1).norm(dim=1).view(B, M)
    for b, kb in enumerate([1, 2, 4, 3]):
        selected = set(order[b, :kb].tolist())
        for i in range(M):
            assert (grad_norm[b, i] > 0) == (i in selected), (b, i)  # delta* is detached: no path to delta0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in method.model.parameters())


def test_high_term_trains_the_model_only_when_k_equals_m():
    x, y, noise = _batch(5)
    grads = {}
    for k in ([4, 4, 4, 4], [3, 3, 3, 3]):
        for lbd in (0.0, 1.0):
            method = _method(lbd=lbd)
            _fix(method, noise, k)
            method.training_loss(x, y, None).backward()
            grads[tuple(k), lbd] = torch.cat([p.grad.flatten() for p in method.model.parameters()])
    assert not torch.allclose(grads[(4, 4, 4, 4), 0.0], grads[(4, 4, 4, 4), 1.0])
    assert torch.equal(grads[(3, 3, 3, 3), 0.0], grads[(3, 3, 3, 3), 1.0])


def test_binomial_draw_is_reproducible_and_has_the_binomial_law():
    method = _method()
    p = torch.tensor([0.0, 0.3, 0.75, 1.0]).repeat(5000)
    k = method.sample_k(p).view(5000, 4).float()
    assert k[:, 0].max() == 0 and k[:, 3].min() == M
    for j, q in ((1, 0.3), (2, 0.75)):
        assert k[:, j].mean() == pytest.approx(M * q, abs=0.06)
        assert k[:, j].var() == pytest.approx(M * q * (1 - q), abs=0.06)
    assert torch.equal(_method().sample_k(p), _method().sample_k(p))  # same noise_seed, same draws


# ------------------------------------------------------------------------------------ noise attack
def _attack_setup(shape, seed=0):
    gen = torch.Generator().manual_seed(seed)
    dim = int(np.prod(shape))
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(dim, K_CLASSES))
    x = torch.rand(8, *shape, generator=gen)
    noise0 = 0.25 * torch.randn(8, *shape, generator=gen)
    target = torch.softmax(2 * torch.randn(8, K_CLASSES, generator=gen), dim=-1)
    return model, x, noise0, target


def _mean_rms(t):
    flat = t.flatten(1)
    return flat.mean(1), flat.pow(2).mean(1).sqrt()


def test_noise_attack_projection_and_restandardisation(monkeypatch):
    model, x, noise0, target = _attack_setup(SHAPE)
    eps, seen = 0.6, []
    original = noise_space.restandardize

    def recording(delta, mean0, rms0):
        seen.append(delta.clone())
        return original(delta, mean0, rms0)

    monkeypatch.setattr(noise_space, "restandardize", recording)
    adv = noise_space.kl_noise_pgd(model, x, noise0, target, epsilon=eps, steps=4)
    assert len(seen) == 4
    for before in seen:  # the iterate before re-standardisation lies in the eps-ball around delta0
        assert ((before - noise0).flatten(1).norm(dim=1) <= eps + 1e-5).all()
    mu0, s0 = _mean_rms(noise0)
    mu, rms = _mean_rms(adv)
    torch.testing.assert_close(mu, mu0, atol=1e-6, rtol=0)  # the mean is kept exactly
    # the RMS is kept up to O(mean^2/RMS^2): RMS(out)^2 = mu0^2 + s0^2 (1 - mean(d)^2 / RMS(d)^2), exactly
    m_in, r_in = _mean_rms(seen[-1])
    torch.testing.assert_close(rms.pow(2), mu0.pow(2) + s0.pow(2) * (1 - m_in.pow(2) / r_in.pow(2)))


def test_noise_attack_keeps_mean_and_rms_on_cifar_sized_noise():
    model, x, noise0, target = _attack_setup((3, 32, 32))
    adv = noise_space.kl_noise_pgd(model, x, noise0, target, epsilon=1.0, steps=4)
    (mu0, s0), (mu, rms) = _mean_rms(noise0), _mean_rms(adv)
    torch.testing.assert_close(mu, mu0, atol=1e-5, rtol=0)
    torch.testing.assert_close(rms, s0, atol=1e-5, rtol=1e-4)
    assert ((adv - noise0).flatten(1).norm(dim=1) <= 1.0 + 1e-3).all()


def test_noise_attack_increases_the_kl():
    model, x, noise0, target = _attack_setup(SHAPE, seed=3)

    def kl(noise):
        return F.kl_div(F.log_softmax(model(x + noise), -1), target, reduction="none").sum(-1)

    adv = noise_space.kl_noise_pgd(model, x, noise0, target, epsilon=1.0, steps=4)
    assert (kl(adv) > kl(noise0)).all()
    assert not adv.requires_grad


def test_epsilon_doubles_from_the_configured_epoch():
    method = _method(epsilon=1.0, eps_double_epoch=2)
    for epoch, eps in ((0, 1.0), (1, 1.0), (2, 2.0), (5, 2.0)):
        method.trainer = type("T", (), {"current_epoch": epoch})()
        assert method.current_epsilon == eps
    assert _method(epsilon=1.0).current_epsilon == 1.0


# ----------------------------------------------------------------------------- configuration errors
@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"num_noise_vec": 0}, "method.num_noise_vec"),
        ({"epsilon": 0.0}, "method.epsilon"),
        ({"num_steps": 0}, "method.num_steps"),
        ({"lbd": -0.5}, "method.lbd"),
        ({"eps_double_epoch": -1}, "method.eps_double_epoch"),
        ({"confidence_mask": True}, "method.confidence_mask"),
        ({"soft_labels": "/no/such/file.npy"}, "method.soft_labels"),
    ],
)
def test_bad_hyperparameters_raise_config_error(kwargs, key):
    with pytest.raises(ConfigError) as err:
        _method(**kwargs)
    assert err.value.key == key and str(next(iter(kwargs.values()))) in str(err.value)


@pytest.mark.parametrize(("rows", "classes"), [(9, 10), (10, 3)])
def test_soft_label_shape_mismatch_names_the_key_file_and_shapes(tmp_path, rows, classes):
    path, _ = _soft_file(tmp_path, rows, classes)
    method = _method(soft_labels=str(path))
    with pytest.raises(ConfigError) as err:
        method.attach_soft_labels(10, K_CLASSES)
    message = str(err.value)
    assert err.value.key == "method.soft_labels" and str(path) in message
    assert f"[{rows}, {classes}]" in message and "[10, 10]" in message


def test_soft_label_mismatch_is_caught_when_training_starts(tmp_path):
    path, _ = _soft_file(tmp_path, rows=1000)  # digits has 1437 training images
    cfg = train_config(
        tmp_path,
        [
            "method=catrs",
            f"method.soft_labels={path}",
            "debug=fast_dev_run",
            "logger=none",
            "~callbacks.certification",
        ],
    )
    with pytest.raises(ConfigError, match=r"method.soft_labels.*\[1000, 10\].*\[1437, 10\]"):
        train(cfg)


# -------------------------------------------------------------------------------- training on digits
def test_a_few_steps_on_digits_reduce_the_loss():
    """Progress is measured as the CE of M fixed noisy copies (L^low at K = M): the CAT-RS objective itself
    is not monotone in training, since K grows with the noisy accuracy."""
    data = DigitsDataModule()
    x, y = zip(*(data.dataset("train")[i] for i in range(32)), strict=True)
    x, y = torch.stack(x), torch.tensor(y)
    method = _method(model=_linear(0), num_steps=2)
    fixed = 0.25 * torch.randn(32 * M, *SHAPE, generator=torch.Generator().manual_seed(0))

    def noisy_ce() -> float:
        with torch.no_grad():
            return float(
                F.cross_entropy(method.model(x.repeat_interleave(M, 0) + fixed), y.repeat_interleave(M))
            )

    before = noisy_ce()
    optimizer = torch.optim.SGD(method.parameters(), lr=0.5, momentum=0.9)
    for _ in range(15):
        loss = method.training_loss(x, y, None)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert noisy_ce() < 0.6 * before


def test_config_runs_fast_dev_run_with_soft_labels_and_logs_its_scalars(tmp_path):
    path, _ = _soft_file(tmp_path, rows=1437)
    cfg = train_config(
        tmp_path,
        [
            "method=catrs",
            f"method.soft_labels={path}",
            "method.confidence_mask=true",
            "debug=fast_dev_run",
            "~callbacks.certification",
            "logger=none",
        ],
    )
    assert cfg.method.num_noise_vec == 4 and cfg.method.epsilon == 1.0 and cfg.method.num_steps == 4
    metrics = train(cfg)["metrics"]
    assert {"train/catrs_high_fraction", "train/catrs_low", "train/catrs_high"} <= set(metrics)
    assert 0.0 <= metrics["train/catrs_high_fraction"] <= 1.0 and math.isfinite(metrics["train/loss_step"])


def test_config_runs_fast_dev_run_without_soft_labels_only_when_allowed(tmp_path):
    """Without soft labels CAT-RS is a different method, so training refuses to start (naming
    the key, how to make the file and the opt-in) unless method.allow_onehot=true asks for the fallback."""
    overrides = ["method=catrs", "debug=fast_dev_run", "logger=none", "~callbacks.certification"]
    with pytest.raises(ConfigError, match=r"soft_labels=None.*soft_labels.py.*method.allow_onehot=true"):
        train(train_config(tmp_path / "refused", overrides))
    result = train(train_config(tmp_path / "allowed", [*overrides, "method.allow_onehot=true"]))
    assert math.isfinite(result["metrics"]["train/loss_step"])


def test_catrs_entry_point_refuses_without_soft_labels_in_one_line(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "train.py"),
            "method=catrs",
            "debug=fast_dev_run",
            "logger=none",
            f"hydra.run.dir={tmp_path}/run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(lines) == 1 and "method.allow_onehot=true" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "run" / "checkpoints").exists()


# ----------------------------------------------------------------------------------- soft_labels CLI
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("catrs_pretrain")
    result = train(
        train_config(
            out,
            [
                "model=mlp",
                "optim.max_epochs=2",
                "+trainer.limit_val_batches=0",
                "~callbacks.certification",
                "logger=none",
            ],
        )
    )
    return result["checkpoint"]


def _soft_cfg(checkpoint, output, *overrides):
    cfg = compose_config(
        "soft_labels", [f"checkpoint={checkpoint}", f"output={output}", "num_samples=16", *overrides]
    )
    with open_dict(cfg):
        cfg.device = "cpu"
    return cfg


def test_soft_labels_cli_writes_rows_summing_to_one_and_refuses_to_overwrite(tiny_checkpoint, tmp_path):
    output = tmp_path / "p.npy"
    summary = soft_labels(_soft_cfg(tiny_checkpoint, output))
    p = np.load(output)
    assert p.shape == (1437, 10) and p.dtype == np.float32 and summary["shape"] == [1437, 10]
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(p * 16, np.round(p * 16), atol=1e-4)  # counts / N
    labels = DigitsDataModule().dataset("train").labels.numpy()
    assert p[np.arange(1437), labels].mean() > 0.3  # a trained model, far above chance (0.1)
    assert summary["mean_true_label_probability"] == pytest.approx(
        p[np.arange(1437), labels].mean(), rel=1e-6
    )
    with pytest.raises(ConfigError, match="overwrite=true") as err:
        soft_labels(_soft_cfg(tiny_checkpoint, output, "seed=1"))
    assert err.value.key == "output"
    assert np.array_equal(np.load(output), p)  # untouched
    soft_labels(_soft_cfg(tiny_checkpoint, output, "overwrite=true", "batch_size=100"))
    assert np.array_equal(np.load(output), p)  # same seed -> same file, whatever the batch size
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p.npy"]  # no temporary file left behind
    # the file plugs into training: shape [N_train, K] of digits
    method = _method(
        model=build_classifier(DigitsCNN(input_shape=SHAPE, num_classes=10), None, None),
        soft_labels=str(output),
    )
    method.attach_soft_labels(1437, 10)


def test_soft_labels_entry_point_reports_user_errors_in_one_line(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "soft_labels.py"),
            f"checkpoint={tmp_path}/missing.ckpt",
            f"output={tmp_path}/p.npy",
            f"hydra.run.dir={tmp_path}/run",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and done.stderr.strip().startswith("error: checkpoint=")
    assert "Traceback" not in done.stderr
