"""MACER (Zhai et al. 2020; macer.py): the loss against the formula, the hinge mask, gradients,
the deferred schedule, bad hyperparameters, a few training steps and the configs."""

import functools

import numpy as np
import pytest
import torch
from rs_testing import compose_config
from scipy.stats import norm
from torch import nn

from rs_lightning.methods.macer import MACER
from rs_lightning.validation import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")

SIGMA = 0.5


class FixedLogits(nn.Module):
    """Ignores its input and returns the parameter ``z`` (one row per noisy copy, image-major: row i*k + j is
    copy j of image i), in the order of the method's copy-major batch (row j*B + i)."""

    def __init__(self, z: torch.Tensor, copies: int) -> None:
        super().__init__()
        self.z = nn.Parameter(z.clone())
        self.copies = copies

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert len(x) == len(self.z)
        return self.z.view(-1, self.copies, self.z.shape[-1]).transpose(0, 1).reshape(self.z.shape)


def _macer(model: nn.Module, **kwargs) -> MACER:
    return MACER(model=model, sigma=SIGMA, optimizer=functools.partial(torch.optim.SGD, lr=0.01), **kwargs)


def _fix_noise(method: MACER, noise: torch.Tensor) -> None:
    """``noise`` is image-major (row i*k + j is copy j of image i); the method draws ``(k, B, ...)``."""

    def fixed(like, generator=None):
        copies = noise.view(-1, like.shape[0], *noise.shape[1:]).transpose(0, 1)
        assert like.shape == copies.shape
        return copies

    method.training_noise = fixed


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _expected(z: np.ndarray, y: np.ndarray, beta: float, gamma: float, lbd: float):
    """Zhai et al. 2020 objective from (B, k, K) logits: (1/B) Σ_i [L_C,i + λ L_R,i], and the mask."""
    p_y = _softmax(z).mean(axis=1)[np.arange(len(y)), y]
    l_c = -np.log(p_y + 1e-10)
    p_hat = _softmax(beta * z).mean(axis=1)
    top = np.sort(p_hat, axis=1)[:, ::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        xi = norm.ppf(top[:, 0]) - norm.ppf(top[:, 1])
    active = (p_hat.argmax(axis=1) == y) & np.isfinite(xi) & (xi <= gamma)
    l_r = np.where(active, SIGMA / 2 * (gamma - np.where(active, xi, 0.0)), 0.0)
    return float(np.mean(l_c + lbd * l_r)), active, xi


def test_loss_matches_the_formula_with_image_major_copies():
    torch.manual_seed(0)
    b, k, beta, lbd = 6, 4, 4.0, 3.0
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).double()
    with torch.no_grad():
        net[1].weight.mul_(8)
    x = torch.rand(b, 1, 8, 8, dtype=torch.float64)
    noise = SIGMA * torch.randn(b * k, 1, 8, 8, dtype=torch.float64)
    # copy j of image i is row i*k + j (image-major)
    inputs = x.repeat_interleave(k, dim=0) + noise
    z = net(inputs).detach().numpy().reshape(b, k, 10)
    p_hat = _softmax(beta * z).mean(axis=1)
    y = p_hat.argmax(axis=1)
    y[1::3] = (y[1::3] + 1) % 10  # some images misclassified by the beta-soft smoothed classifier
    _, _, xi = _expected(z, y, beta, np.inf, lbd)
    gamma = float(np.median(xi[np.isfinite(xi)]))  # some correct images above the margin, some below
    loss_ref, active, _ = _expected(z, y, beta, gamma, lbd)
    assert 0 < active.sum() < b - len(y[1::3])  # the mask is really mixed

    method = _macer(net, num_noise_vec=k, beta=beta, gamma=gamma, lbd=lbd)
    _fix_noise(method, noise)
    loss = method.training_loss(x, torch.as_tensor(y))
    assert loss.item() == pytest.approx(loss_ref, rel=1e-9)


def _loss(z: torch.Tensor, y, **kwargs) -> torch.Tensor:
    method = _macer(FixedLogits(z, z.shape[0] // len(y)), num_noise_vec=z.shape[0] // len(y), **kwargs)
    _fix_noise(method, torch.zeros(z.shape[0], 1, 8, 8))
    return method.training_loss(torch.zeros(len(y), 1, 8, 8), torch.as_tensor(y))


def _classification_term(z: torch.Tensor, y, k: int) -> float:
    probs = _softmax(z.numpy().reshape(len(y), k, -1)).mean(axis=1)[np.arange(len(y)), y]
    return float(np.mean(-np.log(probs + 1e-10)))


# one image, k = 2 copies, 3 classes; with beta = 1: p_hat ~ (0.63, 0.23, 0.14), xi ~ 1.07
Z = torch.tensor([[1.2, 0.1, -0.4], [0.8, 0.0, -0.2]])


@pytest.mark.parametrize(
    ("z", "y", "gamma", "has_term"),
    [
        (Z, [0], 8.0, True),  # correct and xi <= gamma: hinge active
        (Z, [1], 8.0, False),  # wrong class under the beta-soft classifier
        (Z, [0], 0.5, False),  # xi > gamma: radius already beyond the margin
        (torch.tensor([[200.0, 0.0, 0.0], [200.0, 0.0, 0.0]]), [0], 8.0, False),  # p_A = 1: xi = inf
        (torch.tensor([[40.0, 0.0, 0.0], [40.0, 0.0, 0.0]]), [1], 8.0, False),  # p_y ~ 4e-18: the + 1e-10
    ],
)
def test_the_robustness_term_is_masked(z, y, gamma, has_term):
    loss = _loss(z, y, beta=1.0, gamma=gamma, lbd=5.0)
    classification = _classification_term(z, y, 2)
    expected, active, _ = _expected(z.numpy().reshape(1, 2, 3), np.array(y), 1.0, gamma, 5.0)
    assert bool(active[0]) == has_term
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert (loss.item() > classification + 1e-3) == has_term


def test_infinite_xi_is_masked_without_nan_gradients():
    z = torch.tensor([[30.0, 0.0, 0.0], [30.0, 0.0, 0.0], [1.0, 0.5, 0.0], [0.9, 0.4, 0.0]])
    method = _macer(FixedLogits(z, 2), num_noise_vec=2, beta=16.0, gamma=8.0, lbd=12.0)
    _fix_noise(method, torch.zeros(4, 1, 8, 8))
    loss = method.training_loss(torch.zeros(2, 1, 8, 8), torch.tensor([0, 0]))
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(method.model.z.grad).all()
    assert method.model.z.grad[2:].abs().sum() > 0


def test_gradient_flows_through_both_p_a_and_p_b():
    """Autograd of the implementation = autograd of the formula with nothing detached, and differs from the
    formula with p_A or p_B detached."""
    beta, gamma, lbd, k = 2.0, 8.0, 5.0, 2
    z = Z.double()
    method = _macer(FixedLogits(z, k), num_noise_vec=k, beta=beta, gamma=gamma, lbd=lbd)
    _fix_noise(method, torch.zeros(2, 1, 8, 8, dtype=torch.float64))
    method.training_loss(torch.zeros(1, 1, 8, 8, dtype=torch.float64), torch.tensor([0])).backward()
    grad = method.model.z.grad

    def formula_grad(detach_a: bool, detach_b: bool) -> torch.Tensor:
        zz = z.clone().requires_grad_(True)
        l_c = -torch.log(torch.softmax(zz, dim=1).mean(0)[0] + 1e-10)
        p_hat = torch.softmax(beta * zz, dim=1).mean(0)
        p_a, p_b = p_hat[0], p_hat[1]  # class 0 and 1 are the top two here
        p_a = p_a.detach() if detach_a else p_a
        p_b = p_b.detach() if detach_b else p_b
        xi = torch.special.ndtri(p_a) - torch.special.ndtri(p_b)
        (l_c + lbd * SIGMA / 2 * (gamma - xi)).backward()
        return zz.grad

    assert torch.allclose(grad, formula_grad(False, False), atol=1e-10)
    assert not torch.allclose(grad, formula_grad(True, False), atol=1e-4)
    assert not torch.allclose(grad, formula_grad(False, True), atol=1e-4)


def test_beta_enters_only_the_robustness_term():
    classification = _classification_term(Z, [0], 2)
    for beta in (0.5, 1.0, 16.0):
        assert _loss(Z, [0], beta=beta, lbd=0.0).item() == pytest.approx(classification, rel=1e-6)
    losses = [_loss(Z, [0], beta=beta, lbd=5.0).item() for beta in (0.5, 1.0)]
    assert losses[0] != pytest.approx(losses[1], rel=1e-4)


def test_lambda_zero_is_the_soft_smoothed_cross_entropy():
    z = torch.randn(12, 10, generator=torch.Generator().manual_seed(3))
    y = [1, 4, 7]
    assert _loss(z, y, lbd=0.0).item() == pytest.approx(_classification_term(z, y, 4), rel=1e-6)


@pytest.mark.parametrize(
    ("deferred", "epoch", "weight"), [(0, 0, 7.0), (31, 0, 0.0), (31, 30, 0.0), (31, 31, 7.0)]
)
def test_deferred_epochs_zero_lambda(monkeypatch, deferred, epoch, weight):
    monkeypatch.setattr(MACER, "current_epoch", property(lambda self: epoch))
    method = _macer(FixedLogits(Z, 2), num_noise_vec=2, lbd=7.0, beta=1.0, deferred_epochs=deferred)
    assert method.robustness_weight() == weight
    _fix_noise(method, torch.zeros(2, 1, 8, 8))
    loss = method.training_loss(torch.zeros(1, 1, 8, 8), torch.tensor([0])).item()
    assert (loss == pytest.approx(_classification_term(Z, [0], 2), rel=1e-6)) == (weight == 0)


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("num_noise_vec", 0, "an integer >= 1"),
        ("num_noise_vec", 2.0, "an integer >= 1"),
        ("beta", 0.0, "> 0"),
        ("beta", -1.0, "> 0"),
        ("gamma", 0.0, "> 0"),
        ("lbd", -0.5, ">= 0"),
        ("deferred_epochs", -1, "an integer >= 0"),
    ],
)
def test_bad_hyperparameters_raise_config_error(key, value, allowed):
    with pytest.raises(ConfigError) as err:
        _macer(nn.Linear(64, 10), **{key: value})
    assert err.value.key == f"method.{key}" and err.value.value == value and allowed in str(err.value)


def test_cifar10_experiment_schedule_is_the_macer_repos():
    """RuntianZ/macer main.py: MultiStepLR([200, 400]) stepped before each epoch (offset -1), 440 epochs,
    batch 64, wd 5e-4 (its README example). The LR per epoch: tests/methods/test_schedules.py."""
    cfg = compose_config("train", ["experiment=macer_cifar10_sigma025", "paths.output_dir=x"])
    assert "step_size" not in cfg.optim.scheduler and list(cfg.optim.scheduler.milestones) == [200, 400]
    assert (cfg.optim.max_epochs, cfg.data.batch_size, cfg.sigma) == (440, 64, 0.25)
    assert cfg.optim.scheduler_epoch_offset == -1 and cfg.optim.optimizer.weight_decay == 5e-4
    assert cfg.method.num_noise_vec == 16 and cfg.method.deferred_epochs == 0


def test_cifar10_sigma050_and_100_are_the_catrs_rerun():
    """The only verified CIFAR-10 MACER values at sigma 0.5 / 1.0 (CAT-RS's re-run, its EXPERIMENTS.MD)."""
    for sigma, lbd, deferred in (("050", 6.0, 0), ("100", 12.0, "lr_drop")):
        cfg = compose_config("train", [f"experiment=macer_cifar10_sigma{sigma}", "paths.output_dir=x"])
        assert (cfg.method.lbd, cfg.method.deferred_epochs, cfg.method.num_noise_vec) == (lbd, deferred, 16)
        assert (cfg.optim.max_epochs, cfg.data.batch_size, cfg.optim.scheduler.step_size) == (150, 64, 50)
        assert cfg.optim.optimizer.lr == 0.1 and cfg.optim.scheduler_epoch_offset == 1


def test_mnist_experiment_is_deferred_until_the_first_lr_drop():
    cfg = compose_config("train", ["experiment=macer_mnist_sigma100", "paths.output_dir=x"])
    assert cfg.method.lbd == 6.0 and cfg.method.deferred_epochs == "lr_drop"
    assert cfg.optim.scheduler.step_size == 30 and cfg.optim.scheduler_epoch_offset == 1
    assert cfg.optim.max_epochs == 90 and cfg.data.batch_size == 256
