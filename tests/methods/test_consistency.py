"""Consistency regularization (Jeong & Shin 2020, consistency.py): the loss and its variants against the
formula, noise-major copies, gradients through p̄, bad hyperparameters, training steps and the configs."""

import functools

import numpy as np
import pytest
import torch
from rs_testing import compose_config
from torch import nn

from rs_lightning.methods.consistency import Consistency
from rs_lightning.validation import ConfigError

pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")

SIGMA = 0.5


def _consistency(model: nn.Module, **kwargs) -> Consistency:
    return Consistency(
        model=model, sigma=SIGMA, optimizer=functools.partial(torch.optim.SGD, lr=0.01), **kwargs
    )


def _fix_noise(method: Consistency, noise: torch.Tensor) -> None:
    def fixed(like, generator=None):
        assert like.shape == noise.shape
        return noise

    method.training_noise = fixed


def _log_softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _setup(m: int, b: int = 5, seed: int = 0):
    """A float64 linear model, a chunk x, labels and noise (m, b, 1, 8, 8); logits (m, b, K) of x + δ_j."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 10)).double()
    with torch.no_grad():
        net[1].weight.mul_(4)
    x = torch.rand(b, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 10, (b,))
    noise = SIGMA * torch.randn(m, b, 1, 8, 8, dtype=torch.float64)
    z = torch.stack([net(x + noise[j]) for j in range(m)]).detach().numpy()
    return net, x, y, noise, z


def _expected(z: np.ndarray, y: np.ndarray, lbd: float, eta: float, loss: str) -> float:
    """Jeong & Shin 2020: CE over all m·B' copies + (1/B') Σ_i [consistency_i] for each ``loss`` variant."""
    m, b, _ = z.shape
    log_p = _log_softmax(z)  # (m, b, K)
    p = np.exp(log_p)
    ce = -np.mean([log_p[j, i, y[i]] for j in range(m) for i in range(b)])
    p_bar = p.mean(axis=0)
    kl = np.mean([(p_bar * (np.log(p_bar) - log_p[j])).sum(-1) for j in range(m)], axis=0)  # KL(p̄ ‖ p_j)
    entropy = -(p_bar * np.log(np.maximum(p_bar, 1e-20))).sum(-1)  # entropy of the mean
    if loss == "default":
        reg = lbd * kl + eta * entropy
    elif loss == "xent":
        reg = lbd * np.mean([-(p_bar * log_p[j]).sum(-1) for j in range(m)], axis=0)  # CE(p̄, p_j)
    elif loss == "kl":
        reg = lbd * kl
    else:
        reg = lbd * ((p[1] - p[0]) ** 2).sum(-1)
    return float(ce + reg.mean())


@pytest.mark.parametrize(
    ("loss", "m"), [("default", 2), ("default", 3), ("xent", 2), ("xent", 4), ("kl", 3), ("mse", 2)]
)
def test_loss_matches_the_formula(loss, m):
    net, x, y, noise, z = _setup(m)
    lbd, eta = 3.0, 0.7
    method = _consistency(net, num_noise_vec=m, lbd=lbd, eta=eta, loss=loss)
    _fix_noise(method, noise)
    value = method.training_loss(x, y)
    assert value.item() == pytest.approx(_expected(z, y.numpy(), lbd, eta, loss), rel=1e-9)


def test_copies_are_noise_major():
    net, x, y, noise, _ = _setup(3)
    seen = []
    net.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    method = _consistency(net, num_noise_vec=3)
    _fix_noise(method, noise)
    method.training_loss(x, y)
    expected = torch.cat([x + noise[0], x + noise[1], x + noise[2]])  # [x + δ_1; x + δ_2; x + δ_3]
    assert torch.equal(seen[0], expected)


def test_kl_direction_and_entropy_of_the_mean_matter():
    """The formula test would not pass with KL(p_j ‖ p̄) or the mean of the entropies: check they differ."""
    _, _, y, _, z = _setup(2)
    log_p = _log_softmax(z)
    p = np.exp(log_p)
    p_bar = p.mean(0)
    kl_mean_to_each = np.mean([(p_bar * (np.log(p_bar) - log_p[j])).sum(-1) for j in range(2)], axis=0)
    kl_each_to_mean = np.mean([(p[j] * (log_p[j] - np.log(p_bar))).sum(-1) for j in range(2)], axis=0)
    assert not np.allclose(kl_mean_to_each, kl_each_to_mean, rtol=1e-3)
    h_of_mean = -(p_bar * np.log(p_bar)).sum(-1)
    mean_of_h = -(p * log_p).sum(-1).mean(0)
    assert not np.allclose(h_of_mean, mean_of_h, rtol=1e-3)


def test_gradient_flows_through_the_mean_prediction():
    """Autograd of the implementation = autograd of the formula with p̄ attached, ≠ with p̄ detached."""
    m, b, k = 2, 3, 4
    z = torch.randn(m * b, k, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 2, 3])

    class FixedLogits(nn.Module):
        def __init__(self):
            super().__init__()
            self.z = nn.Parameter(z.clone())

        def forward(self, inputs):
            assert len(inputs) == m * b
            return self.z

    method = _consistency(FixedLogits(), num_noise_vec=m, lbd=10.0, eta=0.5)
    _fix_noise(method, torch.zeros(m, b, 1, 8, 8, dtype=torch.float64))
    method.training_loss(torch.zeros(b, 1, 8, 8, dtype=torch.float64), y).backward()
    grad = method.model.z.grad

    def formula_grad(detach: bool) -> torch.Tensor:
        zz = z.clone().requires_grad_(True)
        log_p = zz - torch.logsumexp(zz, dim=1, keepdim=True)
        ce = -log_p[torch.arange(m * b), y.repeat(m)].mean()
        log_p = log_p.view(m, b, k)
        p_bar = log_p.exp().mean(0)
        target = p_bar.detach() if detach else p_bar
        kl = (target * (target.log() - log_p)).sum(-1).mean(0)
        entropy = -(p_bar * p_bar.log()).sum(-1)
        (ce + (10.0 * kl + 0.5 * entropy).mean()).backward()
        return zz.grad

    assert torch.allclose(grad, formula_grad(False), atol=1e-10)
    assert not torch.allclose(grad, formula_grad(True), atol=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "key", "allowed"),
    [
        ({"num_noise_vec": 1}, "num_noise_vec", "an integer >= 2"),
        ({"num_noise_vec": 0}, "num_noise_vec", "an integer >= 2"),
        ({"lbd": -1.0}, "lbd", ">= 0"),
        ({"eta": -0.1}, "eta", ">= 0"),
        ({"loss": "js"}, "loss", "one of default, xent, kl, mse"),
        ({"loss": "mse", "num_noise_vec": 3}, "num_noise_vec", "2 with method.loss=mse"),
    ],
)
def test_bad_hyperparameters_raise_config_error(kwargs, key, allowed):
    with pytest.raises(ConfigError) as err:
        _consistency(nn.Linear(64, 10), **kwargs)
    assert err.value.key == f"method.{key}" and err.value.value == kwargs[key] and allowed in str(err.value)


def test_one_optimizer_step_per_chunk_of_b_over_m():
    assert _consistency(nn.Linear(64, 10), num_noise_vec=4).num_chunks == 4


@pytest.mark.parametrize(
    ("name", "lbd", "epochs", "step", "batch"),
    [
        ("consistency_cifar10_sigma025", 20.0, 150, 50, 256),
        ("consistency_cifar10_sigma100", 10.0, 150, 50, 256),
        ("consistency_mnist_sigma050", 5.0, 90, 30, 256),
    ],
)
def test_experiments_compose_with_the_published_recipe(name, lbd, epochs, step, batch):
    cfg = compose_config("train", [f"experiment={name}", "paths.output_dir=x"])
    assert cfg.method.num_noise_vec == 2 and cfg.method.lbd == lbd and cfg.method.eta == 0.5
    assert (cfg.optim.max_epochs, cfg.optim.scheduler.step_size, cfg.data.batch_size) == (epochs, step, batch)


def test_smoothadv_variant_attacks_with_the_same_noises_inside_the_eps_ball():
    """SmoothAdv + Consistency: the forward batch is x̂ + δ_j with x̂ from PGD on the same m noises."""
    net, x, y, noise, _ = _setup(2, b=4)
    seen = []
    net.register_forward_pre_hook(lambda module, args: seen.append(args[0].detach().clone()))
    method = _consistency(net, num_noise_vec=2, epsilon=0.5, num_steps=3, warmup=1)
    _fix_noise(method, noise)
    method.training_loss(x, y)
    batch = seen[-1]  # the train-mode forward comes after the attack's forwards
    x_hat = batch[:4] - noise[0]
    torch.testing.assert_close(batch[4:] - noise[1], x_hat)  # one x̂ shared by both noisy copies
    shift = (x_hat - x).flatten(1).norm(dim=1)
    assert (shift <= 0.5 + 1e-6).all() and (shift > 0.1).all()
    assert x_hat.min() >= -1e-9 and x_hat.max() <= 1 + 1e-9

    # x̂ ascends the soft smoothed CE -log mean_j softmax(f(x + δ_j))_y computed with those noises
    def soft_ce(inputs):
        probs = torch.stack([torch.softmax(net(inputs + noise[j]), -1) for j in range(2)]).mean(0)
        return -torch.log(probs[torch.arange(4), y]).sum()

    assert soft_ce(x_hat) > soft_ce(x)


def test_smoothadv_variant_bad_values():
    with pytest.raises(ConfigError, match="method.epsilon"):
        _consistency(nn.Linear(2, 2), epsilon=0.0)
    with pytest.raises(ConfigError, match="method.num_steps"):
        _consistency(nn.Linear(2, 2), epsilon=1.0, num_steps=0)
