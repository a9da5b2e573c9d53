"""The denoisers' architecture (denoised smoothing, Salman et al. 2020)."""

import pytest
import torch

from rs_lightning.models.denoisers import DnCNN


def test_dncnn_has_the_papers_size_and_keeps_the_image_shape():
    """Catches: a layer too many or too few, biases where DnCNN has none, or BatchNorm missing: Salman et
    al.'s DnCNN (17 layers, 64 channels, RGB) has 558,400 parameters."""
    net = DnCNN(input_shape=(3, 32, 32))
    assert sum(p.numel() for p in net.parameters()) == 558_400
    assert net(torch.rand(2, 3, 32, 32)).shape == (2, 3, 32, 32)
    assert DnCNN(input_shape=(1, 28, 28), depth=5, channels=8)(torch.rand(1, 1, 28, 28)).shape == (
        1,
        1,
        28,
        28,
    )


def test_dncnn_learns_the_residual_and_starts_as_the_identity():
    """Catches: returning R(x) (the predicted noise) instead of x - R(x), or a last layer that is not
    zero-initialized (Salman et al.'s init): a fresh denoiser is the identity, a perturbed one is not."""
    net = DnCNN(input_shape=(1, 8, 8), depth=4, channels=8).eval()
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(net(x), x)
    torch.nn.init.normal_(net.dncnn[-1].weight)
    assert not torch.allclose(net(x), x)
    assert next(iter(net.state_dict())) == "dncnn.0.weight"  # the released denoisers' keys


def test_dncnn_refuses_a_depth_below_two():
    with pytest.raises(ValueError, match="depth >= 2"):
        DnCNN(input_shape=(1, 8, 8), depth=1)


def test_the_unet_denoiser_keeps_the_shape_starts_as_the_identity_and_needs_two_poolings():
    """Catches: a skip connection lost or mis-sized (the output shape or the concatenation breaks), a head
    that is not zeroed (a fresh UNet must pass the image through unchanged) and an image size the two
    poolings cannot halve twice accepted until the first batch."""
    from rs_lightning.models.denoisers import DenoiserUNet

    net = DenoiserUNet(input_shape=(3, 32, 32), width=8).eval()
    x = torch.rand(2, 3, 32, 32)
    assert torch.equal(net(x), x)
    torch.nn.init.normal_(net.head.weight)
    assert net(x).shape == x.shape and not torch.allclose(net(x), x)
    assert DenoiserUNet(input_shape=(1, 28, 28), width=4)(torch.rand(1, 1, 28, 28)).shape == (1, 1, 28, 28)
    with pytest.raises(ValueError, match="divisible by 4"):
        DenoiserUNet(input_shape=(1, 30, 30))
