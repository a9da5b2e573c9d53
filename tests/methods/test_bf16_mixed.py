"""``trainer.precision=bf16-mixed`` for every training method.

1. One real loader batch of each method (all its chunk steps, attacks included) through the CLI's
   ``train(cfg)`` on CPU: the forward passes really ran under bf16 autocast (a hook on the classifier's last
   ``nn.Linear`` sees ``torch.bfloat16`` outputs, in the training forwards and, for the attacking methods, in
   the frozen eval-mode attack forwards), every training forward used the *current* weights (a bf16 weight
   copy cached across the m optimizer steps of one ``training_step`` would be stale; Lightning's autocast has
   ``cache_enabled=False``, this guards it), the loss is a finite float32 and every parameter moved.
2. The loss and attack arithmetic of each method runs in float32 under autocast: loss, gradients and attacks
   are bit-identical whether the network's logits arrive in bf16 or as the same values in float32.
"""

from __future__ import annotations

import functools
import math

import lightning.pytorch as pl
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from rs_testing import train_config
from torch import nn

from rs_lightning.cli.train import train

FAST = ["debug=fast_dev_run", "logger=none", "~callbacks.certification", "optim.batch_size=16"]
BF16 = ["trainer.accelerator=cpu", "trainer.precision=bf16-mixed"]
ADV = ["method.num_steps=2", "method.warmup=1"]
# E_ds = 0 so that discard, reweight and the sphere attack all act in the step that runs; tau = 0 keeps all.
ACR = [
    "method.ds_epoch=0",
    "method.discard_threshold=0.0",
    "method.discard_samples=4",
    "method.num_noise_vec=2",
]

# name -> (overrides, optimizer steps in the batch = num_chunks, whether eval-mode attack forwards happen)
VARIANTS = {
    "gaussian": (["method=gaussian"], 1, False),
    "smoothadv_pgd": (["method=smoothadv", *ADV], 2, True),
    "smoothadv_ddn": (["method=smoothadv", "method.attack=ddn", *ADV], 2, True),
    "smoothadv_pgd_nograd": (["method=smoothadv", "method.no_grad=true", *ADV], 2, True),
    "smoothadv_single_noise": (["method=smoothadv", "method.multi_noise=false", *ADV], 1, True),
    "macer": (["method=macer", "method.num_noise_vec=4"], 1, False),
    "consistency": (["method=consistency"], 2, False),
    "consistency_smoothadv": (["method=consistency", "method.epsilon=0.25", *ADV], 2, True),
    "smoothmix": (["method=smoothmix", "method.mix_step=1", *ADV], 2, True),
    "catrs": (
        ["method=catrs", "method.allow_onehot=true", "method.num_noise_vec=2", "method.num_steps=2"],
        2,
        True,
    ),
    "acr_gaming": (["method=acr_gaming", *ACR], 2, True),
    "discard_hard": (["method=discard_hard", *ACR], 2, False),
    "reweight": (["method=reweight", *ACR], 2, False),
    "sphere_attack": (["method=sphere_attack", *ACR], 2, True),
}


class Probe(pl.Callback):
    """Records, during training steps only, every forward of the classifier's last ``nn.Linear``: its mode,
    output dtype and how far its output is from the same layer applied to the *current* weights."""

    def __init__(self) -> None:
        self.forwards: list[tuple[bool, torch.dtype, float]] = []
        self.outputs: list = []
        self.in_step = False

    def on_fit_start(self, trainer, pl_module) -> None:
        self.before = {n: p.detach().clone() for n, p in pl_module.named_parameters()}
        last = [m for m in pl_module.model.modules() if isinstance(m, nn.Linear)][-1]
        last.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output) -> None:
        if not self.in_step:
            return
        # Detached weights do not require grad, so autocast casts them afresh (never a cached copy).
        fresh = F.linear(inputs[0], module.weight.detach(), module.bias.detach())
        stale = (output.detach().float() - fresh.float()).abs().max().item()
        self.forwards.append((module.training, output.dtype, stale))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.in_step = True

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.in_step = False
        self.outputs.append(outputs)

    def on_train_end(self, trainer, pl_module) -> None:
        self.after = {n: p.detach().clone() for n, p in pl_module.named_parameters()}
        self.optimizer_steps = trainer.global_step


@pytest.mark.parametrize("name", list(VARIANTS))
def test_one_bf16_mixed_batch_trains_under_autocast(name, tmp_path):
    overrides, steps, attacks = VARIANTS[name]
    probe = Probe()
    metrics = train(train_config(tmp_path, [*overrides, *FAST, *BF16]), extra_callbacks=[probe])["metrics"]

    loss = probe.outputs[0]["loss"] if isinstance(probe.outputs[0], dict) else probe.outputs[0]
    assert loss.dtype == torch.float32, "the loss arithmetic must run in float32"
    assert math.isfinite(metrics["train/loss_step"])

    train_forwards = [f for f in probe.forwards if f[0]]
    eval_forwards = [f for f in probe.forwards if not f[0]]
    assert probe.optimizer_steps == steps and len(train_forwards) >= steps
    assert {dtype for _, dtype, _ in probe.forwards} == {torch.bfloat16}, "precision was not applied"
    assert bool(eval_forwards) == attacks, "eval-mode (attack) forwards iff the method attacks"
    assert max(stale for _, _, stale in probe.forwards) == 0.0, "a forward used stale (cached) bf16 weights"

    assert probe.before.keys() == probe.after.keys()
    unchanged = [n for n in probe.before if torch.equal(probe.before[n], probe.after[n])]
    assert not unchanged, f"parameters not updated: {unchanged}"
    if name in ("acr_gaming", "discard_hard"):
        assert metrics["train/kept_inputs"] > 0
    if name in ("acr_gaming", "reweight"):
        assert metrics["train/weight_mean"] > 0


class Bf16Logits(nn.Module):
    """Wraps a network run under autocast: its logits leave as bf16, or as the same values in float32."""

    def __init__(self, net: nn.Module, upcast: bool) -> None:
        super().__init__()
        self.net, self.upcast = net, upcast

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.net(x)
        assert logits.dtype == torch.bfloat16
        return logits.float() if self.upcast else logits


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")
@pytest.mark.parametrize("name", [n for n in VARIANTS if n not in ("discard_hard", "reweight")])
def test_loss_and_attack_arithmetic_is_float32_under_autocast(name, tmp_path):
    method_cfg = train_config(tmp_path, VARIANTS[name][0]).method
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    with torch.no_grad():  # sharper logits: probabilities away from uniform, where bf16 rounding shows
        for layer in (net[1], net[3]):
            layer.weight.mul_(2)
    x, y = torch.rand(8, 1, 8, 8), torch.randint(0, 10, (8,))
    losses, grads = [], []
    for upcast in (False, True):  # same seeds: the same noise, attacks and lambda draws in both runs
        method = instantiate(
            method_cfg,
            model=Bf16Logits(net, upcast),
            sigma=0.25,
            optimizer=functools.partial(torch.optim.SGD, lr=0.01),
            _convert_="object",
        )
        net.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):  # as Lightning's bf16-mixed
            loss = method.training_loss(*method.chunks((x, y))[0])
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in net.parameters()])
    assert losses[0].dtype == torch.float32 and torch.isfinite(losses[0])
    assert torch.equal(losses[0], losses[1]), "part of the loss (or of the attack) ran in bf16"
    for g0, g1 in zip(*grads, strict=True):
        assert torch.equal(g0, g1), "gradients of several loss terms were added up in bf16"
