"""SmoothAdv (Salman et al. 2019): loss and attacks against formulas written out here (Salman et al.'s
Eq. (S); Hadisalman/smoothing-adversarial code/attacks.py)."""

import functools
import math

import pytest
import torch
from rs_testing import train_config
from torch import nn

from rs_lightning.attacks.smoothadv import (
    nograd_direction,
    smoothadv_ddn,
    smoothadv_pgd,
    smoothadv_pgd_nograd,
)
from rs_lightning.cli.train import train
from rs_lightning.data import DigitsDataModule
from rs_lightning.methods import smoothadv as smoothadv_module
from rs_lightning.methods.smoothadv import SmoothAdv
from rs_lightning.validation import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")


def _linear(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 10))


def _method(model=None, **kwargs) -> SmoothAdv:
    params = {"epsilon": 0.5, "num_steps": 3, "num_noise_vec": 2, "warmup": 1, **kwargs}
    return SmoothAdv(
        model if model is not None else _linear(),
        sigma=0.25,
        optimizer=functools.partial(torch.optim.SGD, lr=0.01),
        **params,
    )


def _batch(b: int = 4, seed: int = 1):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(b, 1, 8, 8, generator=gen)
    x[0, 0, :2] = 0.0  # pixels on the box boundary exercise the clamp
    x[1, 0, :2] = 1.0
    return x, torch.randint(0, 10, (b,), generator=gen)


def _l_adv(model, x_prime, y, draws):
    """-log((1/m) sum_j softmax(f(x' + delta_j))_y), written out per image (Salman et al. Eq. (S))."""
    out = []
    for i in range(len(x_prime)):
        probs = [torch.softmax(model((x_prime[i] + d[i])[None])[0], dim=0)[y[i]] for d in draws]
        out.append(-torch.log(torch.clamp(sum(probs) / len(draws), min=1e-20)))
    return torch.stack(out)


# ------------------------------------------------------------------------------------------ training loss
def test_multi_noise_loss_is_mean_ce_over_all_copies_with_the_attack_noise(monkeypatch):
    model, m = _linear(), 3
    method = _method(model, num_noise_vec=m, multi_noise=True)
    x, y = _batch(4)
    fixed = 0.25 * torch.randn(4 * m, 1, 8, 8)  # image-major: row i*m + j is draw j of image i
    shift = 0.05 * torch.randn(4, 1, 8, 8)
    seen = {}

    def fake_attack(xc, yc, noise):
        seen["noise"] = noise.clone()
        return xc + shift

    copies = fixed.view(4, m, 1, 8, 8).transpose(0, 1)  # the method's (m, B, ...) view of the draws
    monkeypatch.setattr(method, "training_noise", lambda like, generator=None: copies)
    monkeypatch.setattr(method, "adversarial_examples", fake_attack)
    loss = method.training_loss(x, y)
    x_hat = x + shift
    expected = sum(
        -torch.log_softmax(model((x_hat[i] + fixed[i * m + j])[None])[0], 0)[y[i]]
        for i in range(4)
        for j in range(m)
    ) / (4 * m)
    torch.testing.assert_close(loss, expected)
    for i in range(4):  # the attack saw the same draws, as (m, B, ...)
        for j in range(m):
            assert torch.equal(seen["noise"][j, i], fixed[i * m + j])


def test_single_noise_loss_uses_the_first_draw_and_attacks_in_m_chunks(monkeypatch):
    model, m = _linear(), 2
    method = _method(model, num_noise_vec=m, multi_noise=False)
    assert method.num_chunks == 1
    x, y = _batch(4)
    draws = iter([0.25 * torch.randn(2 * m, 1, 8, 8) for _ in range(2)])  # one per chunk of 2 images
    used, chunk_sizes = [], []

    def fake_noise(like, generator=None):
        used.append(next(draws))
        copies = used[-1].view(2, m, 1, 8, 8).transpose(0, 1)  # the method's (m, B, ...) view of the draws
        assert copies.shape == like.shape
        return copies

    def fake_attack(xc, yc, noise):
        chunk_sizes.append(len(xc))
        return xc * 0.9

    monkeypatch.setattr(method, "training_noise", fake_noise)
    monkeypatch.setattr(method, "adversarial_examples", fake_attack)
    loss = method.training_loss(x, y)
    assert chunk_sizes == [2, 2]
    first = torch.cat([used[0][0::m], used[1][0::m]])  # draw 1 of each image
    expected = sum(-torch.log_softmax(model((0.9 * x[i] + first[i])[None])[0], 0)[y[i]] for i in range(4)) / 4
    torch.testing.assert_close(loss, expected)


def test_loss_gradient_reaches_the_weights_but_not_the_inputs():
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10))
    method = _method(model, num_noise_vec=2)
    modes = []
    model[1].register_forward_pre_hook(
        lambda mod, args: modes.append((mod.training, mod.weight.requires_grad, args[0].requires_grad))
    )
    model.train()
    x, y = _batch(4)
    x.requires_grad_(True)
    loss = method.training_loss(x, y)
    loss.backward()
    assert x.grad is None  # x_hat is a constant of the outer minimization
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    attack_calls, loss_call = modes[:-1], modes[-1]
    assert len(attack_calls) == 3  # T forward passes in eval mode with frozen weights
    assert all(not training and not frozen_flag for training, frozen_flag, _ in attack_calls)
    assert loss_call[:2] == (True, True) and not loss_call[2]  # train mode; no graph into x_hat
    assert model.training and all(p.requires_grad for p in model.parameters())


def test_num_chunks_follow_multi_noise():
    assert _method(num_noise_vec=4, multi_noise=True).num_chunks == 4
    assert _method(num_noise_vec=4, multi_noise=False).num_chunks == 1


# ------------------------------------------------------------------------------------------------ warm-up
@pytest.mark.parametrize(("epoch", "expected"), [(0, 0.1), (4, 0.5), (9, 1.0), (20, 1.0)])
def test_epsilon_warmup(epoch, expected, monkeypatch):
    method = _method(epsilon=1.0, warmup=10, attack="ddn")
    method.trainer = type("T", (), {"current_epoch": epoch, "global_rank": 0})()
    assert method.current_epsilon == pytest.approx(expected)
    seen = {}

    def fake_ddn(model, x, y, noise, eps, steps, **kwargs):
        seen.update(eps=eps, init_norm=kwargs["init_norm"])
        return x

    monkeypatch.setattr(smoothadv_module, "smoothadv_ddn", fake_ddn)
    x, y = _batch(2)
    method.adversarial_examples(x, y, torch.zeros(2, 2, 1, 8, 8))
    assert seen == {"eps": pytest.approx(expected), "init_norm": pytest.approx(expected)}


def test_no_warmup_when_w_is_one():
    method = _method(epsilon=0.7, warmup=1)
    method.trainer = type("T", (), {"current_epoch": 0, "global_rank": 0})()
    assert method.current_epsilon == pytest.approx(0.7)


# ------------------------------------------------------------------------------------------------ attacks
def _draws(m: int, b: int = 4, seed: int = 2) -> torch.Tensor:
    return 0.25 * torch.randn(m, b, 1, 8, 8, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("attack", ["pgd", "nograd", "ddn"])
@pytest.mark.parametrize("eps", [0.3, 3.0])
def test_attacks_stay_in_the_ball_and_the_box(attack, eps):
    model, (x, y), noise = _linear(), _batch(6), _draws(4, 6)
    if attack == "pgd":
        x_adv = smoothadv_pgd(model, x, y, noise, eps, 5)
    elif attack == "nograd":
        x_adv = smoothadv_pgd_nograd(model, x, y, noise, eps, 5)
    else:
        x_adv = smoothadv_ddn(model, x, y, noise, eps, 5, init_norm=eps, levels=None)
    assert (x_adv - x).flatten(1).norm(dim=1).max() <= eps + 1e-5
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert not x_adv.requires_grad


@pytest.mark.parametrize("attack", [smoothadv_pgd, smoothadv_pgd_nograd])
def test_a_zero_direction_is_drawn_from_the_given_generator(attack):
    """Where the ascent direction is exactly 0 (a constant model, zero noise) the step is N(0, I) from the
    caller's generator (reference attacks.py: "avoid nan or inf if gradient is 0"). Catches an attack that
    drops the generator and draws from the global RNG: two global seeds then give different outputs."""
    model, (x, y) = _linear(), _batch(4)
    nn.init.zeros_(model[1].weight)  # constant logits: the gradient and the no-grad direction are 0
    noise = torch.zeros(2, *x.shape)
    outputs = []
    for global_seed in (0, 1):
        torch.manual_seed(global_seed)
        outputs.append(attack(model, x, y, noise, 0.5, 2, generator=torch.Generator().manual_seed(7)))
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
    assert (outputs[0] - x).flatten(1).norm(dim=1).min() > 0  # a random step was taken


def test_ddn_quantized_output_stays_in_the_box_near_the_ball():
    model, (_, y), noise = _linear(), _batch(6), _draws(4, 6)
    x = torch.randint(0, 256, (6, 1, 8, 8), generator=torch.Generator().manual_seed(3)) / 255.0
    x_adv = smoothadv_ddn(model, x, y, noise, 0.5, 5, init_norm=0.5)
    assert x_adv.min() >= 0 and x_adv.max() <= 1
    assert (x_adv - x).flatten(1).norm(dim=1).max() <= 0.5 + math.sqrt(64) / (2 * 255) + 1e-6


@pytest.mark.parametrize("m", [1, 4])
def test_pgd_increases_the_smoothed_loss(m):
    model, (x, y), noise = _linear(), _batch(6), _draws(m, 6)
    x_adv = smoothadv_pgd(model, x, y, noise, 0.5, 10)
    with torch.no_grad():
        clean, adv = _l_adv(model, x, y, noise), _l_adv(model, x_adv, y, noise)
    assert (adv > clean).all()


def test_one_pgd_step_matches_the_formula():
    """T = 1: x_hat = Proj_eps(clamp(x + 2 eps g / ||g||, 0, 1) - x) + x, g = grad of l_adv at x."""
    model, (x, y), noise, eps = _linear(), _batch(4), _draws(3), 0.4
    xg = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(_l_adv(model, xg, y, noise).sum(), xg)
    for i in range(4):
        step = x[i] + 2 * eps * g[i] / g[i].norm()
        delta = step.clamp(0, 1) - x[i]
        delta = delta * min(1.0, eps / delta.norm().item())
        g[i] = x[i] + delta
    torch.testing.assert_close(smoothadv_pgd(model, x, y, noise, eps, 1), g)


def test_nograd_direction_matches_the_formula_and_the_smoothing_gradient():
    model, (x, y) = _linear(), _batch(3)
    noise = _draws(3, 3)
    expected = torch.zeros_like(x)
    for i in range(3):
        for j in range(3):
            p_y = torch.softmax(model((x[i] + noise[j, i])[None])[0], 0)[y[i]]
            expected[i] += -p_y * noise[j, i] / 3
    torch.testing.assert_close(nograd_direction(model, x, y, noise), expected)
    # with many draws it estimates sigma^2 * grad of -E[F(x + delta)_y] (Gaussian-smoothing identity)
    many = _draws(20000, 3, seed=5)
    xg = x.clone().requires_grad_(True)
    p_y = torch.softmax(model((xg[None] + many).flatten(0, 1)), -1).view(20000, 3, 10)[..., y[0]]
    (true_grad,) = torch.autograd.grad(-p_y[:, 0].mean(), xg)
    estimate = nograd_direction(model, x[:1], y[:1], many[:, :1])
    cosine = torch.nn.functional.cosine_similarity(estimate.flatten(), true_grad[0].flatten(), dim=0)
    assert cosine > 0.9


def test_one_nograd_step_matches_the_formula():
    model, (x, y), noise, eps = _linear(), _batch(4), _draws(3), 0.4
    g = nograd_direction(model, x, y, noise)
    expected = torch.empty_like(x)
    for i in range(4):
        delta = (x[i] + 2 * eps * g[i] / g[i].norm()).clamp(0, 1) - x[i]
        expected[i] = x[i] + delta * min(1.0, eps / delta.norm().item())
    torch.testing.assert_close(smoothadv_pgd_nograd(model, x, y, noise, eps, 1), expected)


def test_ddn_returns_the_clean_image_when_no_adversarial_is_found():
    model = _linear()
    with torch.no_grad():
        model[1].bias.copy_(torch.tensor([50.0] + [0.0] * 9))  # class 0 everywhere within the ball
    x, _ = _batch(4)
    y = torch.zeros(4, dtype=torch.long)
    x_adv = smoothadv_ddn(model, x, y, _draws(2), 1.0, 5, init_norm=1.0)
    assert torch.equal(x_adv, x)


def test_ddn_finds_small_adversarials_on_a_weak_model():
    model, (x, _), noise = _linear(), _batch(6), _draws(2, 6)
    with torch.no_grad():
        y = model(x).argmax(1)  # clean predictions are correct
    x_adv = smoothadv_ddn(model, x, y, noise, 10.0, 20, init_norm=1.0, levels=None)
    with torch.no_grad():
        preds = model((x_adv[None] + noise).flatten(0, 1)).argmax(1).view(2, 6)
    moved = (x_adv != x).flatten(1).any(1)
    assert moved.any()
    assert (torch.mode(preds, 0).values[moved] != y[moved]).all()


def test_attacks_refuse_inputs_outside_the_unit_box():
    model, (x, y), noise = _linear(), _batch(2), _draws(2, 2)
    for bad in (x - 0.5, x + 0.5):
        for attack in (
            lambda z: smoothadv_pgd(model, z, y, noise, 0.5, 2),
            lambda z: smoothadv_ddn(model, z, y, noise, 0.5, 2, init_norm=0.5),
        ):
            with pytest.raises(ValueError, match=r"\[0, 1\]"):
                attack(bad)
    with pytest.raises(ValueError, match="m >= 2"):
        smoothadv_pgd_nograd(model, x, y, noise[:1], 0.5, 2)


# ------------------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    ("key", "kwargs"),
    [
        ("epsilon", {"epsilon": 0.0}),
        ("epsilon", {"epsilon": -1.0}),
        ("num_steps", {"num_steps": 0}),
        ("num_noise_vec", {"num_noise_vec": 0}),
        ("warmup", {"warmup": 0}),
        ("attack", {"attack": "fgsm"}),
        ("no_grad", {"no_grad": True, "attack": "ddn"}),
        ("no_grad", {"no_grad": True, "num_noise_vec": 1}),
        ("multi_noise", {"multi_noise": "yes"}),
        ("ddn_gamma", {"ddn_gamma": 1.5}),
    ],
)
def test_bad_hyperparameters_are_refused(key, kwargs):
    with pytest.raises(ConfigError) as err:
        _method(**kwargs)
    assert err.value.key == f"method.{key}"
    assert f"method.{key}=" in str(err.value)


def test_training_steps_reduce_the_loss_on_digits():
    data = DigitsDataModule(batch_size=64)
    data.setup("fit")
    x, y = next(iter(data.train_dataloader()))
    method = _method(_linear(), epsilon=0.25, num_steps=2, num_noise_vec=2)
    optimizer = torch.optim.SGD(method.parameters(), lr=0.2, momentum=0.9)

    def fixed_noise_loss():
        method._train_generator = method._generator(0)  # the same draws for both evaluations
        return method.training_loss(x, y).item()

    before = fixed_noise_loss()
    for _ in range(20):
        loss = method.training_loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert fixed_noise_loss() < 0.5 * before


@pytest.mark.parametrize(
    "overrides", [[], ["method.attack=ddn", "method.multi_noise=false", "method.num_noise_vec=1"]]
)
def test_config_composes_and_runs_fast_dev_run(tmp_path, overrides):
    cfg = train_config(tmp_path, ["method=smoothadv", "debug=fast_dev_run", "logger=none", *overrides])
    result = train(cfg)
    assert result["metrics"]["train/epsilon"] == pytest.approx(cfg.method.epsilon / cfg.method.warmup)
