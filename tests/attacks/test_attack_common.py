"""Shared attack pieces against formulas written here."""

import torch
import torch.nn.functional as F
from torch import nn

from rs_lightning.attacks import normalize_l2, per_sample_norm, project_l2
from rs_lightning.smoothing.soft import frozen_eval, smoothed_nll


def test_smoothed_nll_is_log_of_averaged_softmax():
    torch.manual_seed(0)
    logits, y = torch.randn(3, 5, 4), torch.randint(0, 4, (5,))
    probs = torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True)
    expected = -torch.log(probs.mean(0)[torch.arange(5), y])
    torch.testing.assert_close(smoothed_nll(logits, y, reduction="none"), expected)
    # differs from the mean of per-copy cross-entropies (Jensen), which the soft smoothed CE is not
    per_copy = torch.stack([F.cross_entropy(logits[j], y, reduction="none") for j in range(3)]).mean(0)
    assert (per_copy >= expected - 1e-6).all() and not torch.allclose(per_copy, expected)


def test_norm_helpers():
    g = torch.tensor([[3.0, 4.0], [0.0, 0.0]]).view(2, 1, 1, 2)
    assert per_sample_norm(g).flatten().tolist() == [5.0, 0.0]
    assert torch.allclose(per_sample_norm(normalize_l2(g)).flatten(), torch.tensor([1.0, 0.0]), atol=1e-6)
    projected = project_l2(g, 2.5)
    assert torch.allclose(projected[0].flatten(), torch.tensor([1.5, 2.0])) and torch.equal(
        projected[1], g[1]
    )


def test_frozen_eval_restores_mode_and_flags():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[0].bias.requires_grad_(False)
    model.train()
    with frozen_eval(model):
        assert not model.training and not any(p.requires_grad for p in model.parameters())
    assert model.training and model[0].weight.requires_grad and not model[0].bias.requires_grad
