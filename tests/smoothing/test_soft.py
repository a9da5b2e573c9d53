"""The soft smoothed classifier's shared pieces: the copy layout of noisy_logits and copy_rows."""

import torch
from torch import nn

from rs_lightning.smoothing.soft import copy_rows, noisy_logits, smoothed_softmax


def test_noisy_logits_and_copy_rows_share_the_copy_major_layout():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    x, noise = torch.rand(3, 1, 3, 4), torch.randn(4, 3, 1, 3, 4)
    logits = noisy_logits(model, x, noise)
    assert logits.shape == (4, 3, 5)
    rows = copy_rows(x, 4)
    assert rows.shape == (12, 1, 3, 4)
    torch.testing.assert_close(model(rows + noise.flatten(0, 1)).view(4, 3, 5), logits)
    for j in range(4):
        for b in range(3):
            assert torch.equal(rows[j * 3 + b], x[b])
            torch.testing.assert_close(logits[j, b], model((x[b] + noise[j, b])[None])[0])
    torch.testing.assert_close(smoothed_softmax(logits), torch.softmax(logits, -1).mean(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert noisy_logits(model, x, noise).dtype == torch.float32  # loss arithmetic in float32
