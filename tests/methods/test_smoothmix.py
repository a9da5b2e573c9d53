"""SmoothMix (Jeong et al., NeurIPS 2021) against jh-jeong/smoothmix code/train.py written out here."""

import functools

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from rs_testing import train_config
from torch import nn

import rs_lightning.methods.smoothmix as smoothmix_module
from rs_lightning.attacks.smoothmix import smoothmix_pgd
from rs_lightning.cli.train import train
from rs_lightning.data import DigitsDataModule
from rs_lightning.methods.smoothmix import SmoothMix
from rs_lightning.models import DigitsCNN, build_classifier
from rs_lightning.validation import ConfigError

SIGMA, B, K = 0.25, 6, 10


class AtEpoch(SmoothMix):
    """SmoothMix whose 0-based epoch is set by the test (no Trainer attached)."""

    epoch = 0

    @property
    def current_epoch(self) -> int:
        return self.epoch


def _linear() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(64, K))


def _method(model=None, epoch=0, **kwargs) -> AtEpoch:
    method = AtEpoch(
        model=model or _linear(),
        sigma=SIGMA,
        optimizer=functools.partial(torch.optim.SGD, lr=0.1),
        **{"num_noise_vec": 2, "num_steps": 3, "alpha": 0.5, "eta": 5.0, **kwargs},
    )
    method.epoch = epoch
    return method


def _fixed(method, noise, lam):
    """Fix the noises (image-major draw of B*m, seen by the method as ``(m, B, ...)``) and λ, and record the
    logged values."""
    logged = {}
    method.training_noise = lambda like, generator=None: (
        noise.view(like.shape[1], like.shape[0], *like.shape[2:]).transpose(0, 1).to(like)
    )
    method.draw_lambda = lambda like: lam
    method.log = lambda name, value, **kw: logged.__setitem__(name, float(value))
    return logged


def _inputs(m, seed=1):
    gen = torch.Generator().manual_seed(seed)
    x = 0.25 + 0.5 * torch.rand(B, 1, 8, 8, generator=gen)
    noise = SIGMA * torch.randn(B * m, 1, 8, 8, generator=gen)
    lam = 0.5 * torch.rand(B, generator=gen)
    return x, noise, lam


# ---------------------------------------------------------- the formula, written independently
def _reference(model, x, y, noise, lam, *, m, T, alpha, eta, mix_step, w_e, detach_target=False):
    """jh-jeong/smoothmix ``train`` with explicit per-noise loops; returns (loss, ce, mix, c, x_c)."""
    delta = noise.view(len(x), m, *x.shape[1:])  # delta[:, i] = δ_i of every image (image-major draw)
    rows = torch.arange(len(x))

    def softmax(z):
        e = torch.exp(z - z.max(dim=1, keepdim=True).values)
        return e / e.sum(dim=1, keepdim=True)

    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    x_t, x_c = x.clone(), x.clone()
    for t in range(T):
        if t == mix_step:
            x_c = x_t.clone()
        x_t = x_t.detach().requires_grad_(True)
        f_bar = sum(softmax(model(x_t + delta[:, i])) for i in range(m)) / m
        objective = -torch.log(torch.clamp(f_bar[rows, y], min=1e-20)).sum()
        (g,) = torch.autograd.grad(objective, x_t)
        g_norm = g.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
        x_t = torch.clamp(x_t + alpha * g / (g_norm + 1e-8), 0, 1).detach()
    radius = w_e * alpha * mix_step
    d = x_c - x
    d_norm = d.flatten(1).norm(dim=1).view(-1, 1, 1, 1)
    x_c = torch.clamp(x + torch.where(d_norm > radius, d * radius / d_norm, d), 0, 1)
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)

    clean = [model(x_c + delta[:, i]) for i in range(m)]
    ce = torch.stack([-torch.log(softmax(z)[rows, y]) for z in clean]).mean()
    p_bar = sum(softmax(z) for z in clean) / m
    target = p_bar.detach() if detach_target else p_bar
    lam4 = lam.view(-1, 1, 1, 1)
    x_mix = (1 - lam4) * x_c + lam4 * x_t
    y_hat = (1 - lam[:, None]) * target + lam[:, None] / K
    kl = torch.stack(
        [
            (y_hat * (torch.log(y_hat) - torch.log(softmax(model(x_mix + delta[:, i]))))).sum(1)
            for i in range(m)
        ]
    )  # (m, B)
    c = (p_bar.argmax(dim=1) == y).float()
    mix = (c[None] * kl).mean()
    return ce + eta * w_e * mix, ce, mix, c, x_c


def _half_correct_labels(model, x):
    """y = the clean prediction for the first half, another class for the second half."""
    with torch.no_grad():
        pred = model(x).argmax(dim=1)
    y = pred.clone()
    y[B // 2 :] = (pred[B // 2 :] + 3) % K
    return y


@pytest.mark.parametrize(("mix_step", "epoch"), [(0, 3), (1, 0), (2, 20)])
def test_loss_matches_the_formula(mix_step, epoch):
    m, T, alpha, eta = 2, 3, 0.5, 5.0
    w_e = min(1.0, (epoch + 1) / 10)
    method = _method(epoch=epoch, mix_step=mix_step)
    x, noise, lam = _inputs(m)
    y = _half_correct_labels(method.model, x)
    logged = _fixed(method, noise, lam)
    loss = method.training_loss(x, y)
    expected, ce, mix, c, _ = _reference(
        method.model, x, y, noise, lam, m=m, T=T, alpha=alpha, eta=eta, mix_step=mix_step, w_e=w_e
    )
    assert 0 < c.sum() < B  # the indicator masks some samples and keeps others
    torch.testing.assert_close(loss, expected, rtol=1e-5, atol=1e-6)
    assert logged["train/smoothmix_ce"] == pytest.approx(ce.item(), rel=1e-5, abs=1e-7)
    assert logged["train/smoothmix_mix"] == pytest.approx(mix.item(), rel=1e-5, abs=1e-7)
    assert mix.item() > 0


def test_gradient_flows_into_the_clean_branch_through_the_soft_target():
    m = 2
    method = _method(epoch=20, mix_step=1)
    x, noise, lam = _inputs(m)
    y = _half_correct_labels(method.model, x)
    _fixed(method, noise, lam)
    method.training_loss(x, y).backward()
    got = [p.grad.clone() for p in method.model.parameters()]

    def ref_grads(detach_target):
        method.model.zero_grad()
        kw = dict(m=m, T=3, alpha=0.5, eta=5.0, mix_step=1, w_e=1.0, detach_target=detach_target)
        _reference(method.model, x, y, noise, lam, **kw)[0].backward()
        return [p.grad.clone() for p in method.model.parameters()]

    for g, r in zip(got, ref_grads(detach_target=False), strict=True):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6)
    detached = ref_grads(detach_target=True)
    assert max((g - r).abs().max().item() for g, r in zip(got, detached, strict=True)) > 1e-4


def test_samples_the_smoothed_classifier_gets_wrong_have_no_mix_loss():
    m = 2
    method = _method(epoch=20)
    x, noise, lam = _inputs(m)
    delta = noise.view(B, m, 1, 8, 8)
    with torch.no_grad():  # mix_step 0: x_c = x, so p̄ comes from x + δ_i
        p_bar = sum(F.softmax(method.model(x + delta[:, i]), dim=1) for i in range(m)) / m
    y = (p_bar.argmax(dim=1) + 1) % K  # every sample wrong
    logged = _fixed(method, noise, lam)
    loss = method.training_loss(x, y)
    ce = torch.stack([F.cross_entropy(method.model(x + delta[:, i]), y) for i in range(m)]).mean()
    torch.testing.assert_close(loss, ce)
    assert logged["train/smoothmix_mix"] == 0.0


# ------------------------------------------------------------------------------------ attack
def _objective(model, x, y, delta):
    with torch.no_grad():
        f_bar = sum(F.softmax(model(x + delta[i]), dim=1) for i in range(len(delta))) / len(delta)
    return -torch.log(f_bar[torch.arange(len(x)), y])


def _attack_setup(m=3):
    model = _linear().eval().requires_grad_(False)
    x, noise, _ = _inputs(m)
    delta = noise.view(B, m, 1, 8, 8).transpose(0, 1)  # (m, B, ...)
    y = torch.arange(B) % K
    return model, x, y, delta


def test_one_attack_step_is_a_normalized_gradient_step_of_length_alpha_and_ascends():
    model, x, y, delta = _attack_setup()
    alpha = 0.3
    x_c, x_hat = smoothmix_pgd(model, x, y, delta, alpha=alpha, num_steps=1)
    x_var = x.clone().requires_grad_(True)
    f_bar = sum(F.softmax(model(x_var + delta[i]), dim=1) for i in range(len(delta))) / len(delta)
    (g,) = torch.autograd.grad(-torch.log(f_bar[torch.arange(B), y]).sum(), x_var)
    expected = (x + alpha * g / (g.flatten(1).norm(dim=1).view(-1, 1, 1, 1) + 1e-8)).clamp(0, 1)
    torch.testing.assert_close(x_hat, expected)
    step = (x_hat - x).flatten(1).norm(dim=1)
    assert (step <= alpha + 1e-6).all() and (step > 0.99 * alpha).all()  # x is interior: no clamp
    assert (_objective(model, x_hat, y, delta) > _objective(model, x, y, delta)).all()
    assert torch.equal(x_c, x) and not x_hat.requires_grad


def test_attack_path_steps_are_bounded_stay_in_the_box_and_increase_the_objective():
    model, x, y, delta = _attack_setup()
    alpha, T = 0.5, 4
    path = [x] + [smoothmix_pgd(model, x, y, delta, alpha=alpha, num_steps=t)[1] for t in range(1, T + 1)]
    for prev, nxt in zip(path, path[1:], strict=False):
        assert ((nxt - prev).flatten(1).norm(dim=1) <= alpha + 1e-6).all()
        assert nxt.min() >= 0 and nxt.max() <= 1
    assert ((path[-1] - x).flatten(1).norm(dim=1) <= T * alpha + 1e-5).all()
    assert (_objective(model, path[-1], y, delta) > _objective(model, x, y, delta)).all()
    bounded = smoothmix_pgd(model, x, y, delta, alpha=alpha, num_steps=T, maxnorm=0.7)[1]
    assert ((bounded - x).flatten(1).norm(dim=1) <= 0.7 + 1e-5).all()
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        smoothmix_pgd(model, x + 1.0, y, delta, alpha=alpha, num_steps=T)


@pytest.mark.parametrize(("epoch", "w_e"), [(0, 0.1), (4, 0.5), (30, 1.0)])
@pytest.mark.parametrize("mix_step", [0, 2])
def test_clean_side_is_x_or_within_the_warmed_up_radius(monkeypatch, epoch, w_e, mix_step):
    m, alpha = 2, 0.5
    seen = {}

    def recording(model, *args, **kwargs):
        seen["frozen_eval"] = not model.training and not any(p.requires_grad for p in model.parameters())
        seen["x_c"], seen["x_hat"] = smoothmix_pgd(model, *args, **kwargs)
        return seen["x_c"], seen["x_hat"]

    monkeypatch.setattr(smoothmix_module, "smoothmix_pgd", recording)
    method = _method(epoch=epoch, mix_step=mix_step, alpha=alpha, num_steps=3)
    x, noise, lam = _inputs(m)
    _fixed(method, noise, lam)
    method.training_loss(x, torch.arange(B) % K)
    assert seen["frozen_eval"] and method.model.training  # attack in eval/frozen, loss passes in train mode
    dist = (seen["x_c"] - x).flatten(1).norm(dim=1)
    if mix_step == 0:
        assert torch.equal(seen["x_c"], x)
    else:
        assert (dist <= w_e * alpha * mix_step + 1e-5).all()
        if w_e < 1:  # two unit-α steps reach farther than the warmed-up radius, which then binds
            torch.testing.assert_close(dist, torch.full_like(dist, w_e * alpha * mix_step))
    assert seen["x_c"].min() >= 0 and seen["x_c"].max() <= 1


def test_warmup_factor():
    method = _method()
    values = []
    for epoch in (0, 4, 9, 10, 100):
        method.epoch = epoch
        values.append(method.warmup(method.warmup_epochs))
    assert values == pytest.approx([0.1, 0.5, 1.0, 1.0, 1.0])
    one = _method(warmup=1)
    assert one.warmup(one.warmup_epochs) == 1.0


# ------------------------------------------------------------------------------ config
def test_defaults_and_chunking():
    method = _method(num_noise_vec=4, mix_step=1)
    assert method.num_chunks == 4 and method.maxnorm_s == pytest.approx(0.5) and method.maxnorm is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num_noise_vec", 0),
        ("num_steps", 0),
        ("alpha", 0.0),
        ("eta", -1.0),
        ("mix_step", -1),
        ("mix_step", 3),  # = num_steps: the reference would silently fall back to x
        ("maxnorm", 0.0),
        ("maxnorm_s", -0.5),
        ("warmup", 0),
    ],
)
def test_bad_hyperparameters_name_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"method\.{key}={value}") as err:
        _method(**{key: value})
    assert err.value.key == f"method.{key}" and err.value.value == value


# -------------------------------------------------------------------------------- training
def test_a_few_steps_on_digits_reduce_the_loss():
    torch.manual_seed(0)
    data = DigitsDataModule(batch_size=64)
    data.setup("fit")
    x, y = next(iter(data.train_dataloader()))
    net = DigitsCNN(input_shape=(1, 8, 8), num_classes=10)
    method = SmoothMix(
        model=build_classifier(net, None, None),
        sigma=SIGMA,
        optimizer=functools.partial(torch.optim.SGD, lr=0.1, momentum=0.9),
        num_noise_vec=2,
        num_steps=2,
        alpha=0.5,
        eta=1.0,
        warmup=1,
    )

    def fixed_loss():
        """The loss on 32 images with seeded noises and λ = 1/4 (the same draws before and after training)."""
        gen = torch.Generator().manual_seed(7)
        noise = SIGMA * torch.randn(64, 1, 8, 8, generator=gen)  # 32 images x 2 copies
        _fixed(method, noise, torch.full((32,), 0.25))
        loss = method.training_loss(x[:32], y[:32]).item()
        for name in ("training_noise", "draw_lambda", "log"):
            del method.__dict__[name]
        return loss

    before = fixed_loss()
    trainer = pl.Trainer(
        max_epochs=2,
        limit_train_batches=6,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(method, datamodule=data)
    assert trainer.global_step == 2 * 6 * 2  # m = 2 optimizer steps per loader batch
    assert fixed_loss() < 0.8 * before


def test_config_composes_and_runs_fast_dev_run(tmp_path):
    cfg = train_config(tmp_path, ["method=smoothmix", "debug=fast_dev_run", "logger=none"])
    assert cfg.method.num_noise_vec == 2 and cfg.method.mix_step == 0
    train(cfg)
