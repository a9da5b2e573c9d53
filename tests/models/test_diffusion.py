"""One-shot diffusion denoising (Carlini et al., ICLR 2023): the timestep, the one-step estimate, the DDPM
loss, the diffusers folder layouts, and method=diffusion through train.py and certify.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from rs_testing import SMALL, certify_config, train_config

from rs_lightning.cli.certify import certify, plan_run
from rs_lightning.cli.train import train
from rs_lightning.models.checkpoint import build_denoiser, load_classifier
from rs_lightning.models.diffusion import (
    DiffusionDenoiser,
    diffusers_config,
    load_diffusers_weights,
    one_shot_timestep,
)
from rs_lightning.validation import ConfigError

TINY = {
    "block_out_channels": [8, 16],
    "down_block_types": ["DownBlock2D", "DownBlock2D"],
    "up_block_types": ["UpBlock2D", "UpBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 4,
}


def tiny(**kwargs) -> DiffusionDenoiser:
    torch.manual_seed(0)
    return DiffusionDenoiser(input_shape=(1, 8, 8), unet=TINY, **kwargs).eval()


@pytest.mark.parametrize("sigma", [0.12, 0.25, 0.5, 1.0])
def test_the_timestep_has_the_inputs_noise_to_signal_ratio(sigma):
    """Catches: t* chosen for sigma instead of 2 sigma (the [-1, 1] scale doubles the noise), for the
    variance instead of the standard deviation, or one step off. Reference: Ho et al.'s linear betas in
    numpy, alpha_bar = 1/(1 + 4 sigma^2) crossed between t* - 1 and t*."""
    alpha_bar = np.cumprod(1 - np.linspace(1e-4, 0.02, 1000, dtype=np.float64))
    t = one_shot_timestep(torch.tensor(alpha_bar, dtype=torch.float32), sigma)
    target = 1 / (1 + 4 * sigma**2)
    assert alpha_bar[t] <= target * (1 + 1e-6) and alpha_bar[t - 1] > target * (1 - 1e-6)


def test_with_the_true_noise_the_one_step_estimate_is_the_clean_image():
    """Catches: x_t not scaled by sqrt(alpha_bar), the image not mapped to [-1, 1] and back, or the
    estimate's formula wrong. An oracle network that returns the forward process's own noise,
    (x_t - sqrt(alpha_bar) x0) / sqrt(1 - alpha_bar) with x0 the clean image, must give back x exactly."""
    denoiser = tiny(clip=False)
    denoiser.sigma = 0.25
    x = torch.rand(4, 1, 8, 8)
    x0 = 2 * x - 1
    t = one_shot_timestep(denoiser.alphas_cumprod, 0.25)
    alpha_bar = denoiser.alphas_cumprod[t]
    seen = []

    def oracle(x_t, steps):
        seen.append(steps)
        return (x_t - alpha_bar.sqrt() * x0) / (1 - alpha_bar).sqrt()

    denoiser.eps = oracle
    noisy = x + 0.25 * torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(denoiser(noisy), x, atol=1e-5)
    assert torch.equal(seen[0], torch.full((4,), t))


def test_the_ddpm_loss_is_zero_for_the_forward_processs_noise():
    """Catches: sqrt(alpha_bar) and sqrt(1 - alpha_bar) swapped, x not mapped to [-1, 1], or the loss
    taken against x instead of the noise: an oracle that recovers the noise from x_t and t scores 0, one
    that returns zeros scores about E[eps^2] = 1."""
    denoiser = tiny()
    x = torch.rand(64, 1, 8, 8)

    def oracle(x_t, t):
        alpha_bar = denoiser.alphas_cumprod[t].view(-1, 1, 1, 1)
        return (x_t - alpha_bar.sqrt() * (2 * x - 1)) / (1 - alpha_bar).sqrt()

    denoiser.eps = oracle
    assert denoiser.ddpm_loss(x, torch.Generator().manual_seed(0)) < 1e-8
    denoiser.eps = lambda x_t, t: torch.zeros_like(x_t)
    assert 0.9 < denoiser.ddpm_loss(x, torch.Generator().manual_seed(0)) < 1.1


def test_a_learned_variance_model_uses_its_first_channels_and_sigma_is_required():
    denoiser = tiny(learn_sigma=True)
    assert denoiser.unet.config.out_channels == 2
    assert denoiser.eps(torch.rand(2, 1, 8, 8), torch.tensor([3, 3])).shape == (2, 1, 8, 8)
    with pytest.raises(ValueError, match="set the noise level"):
        denoiser(torch.rand(1, 1, 8, 8))
    with pytest.raises(ValueError, match="square"):
        DiffusionDenoiser(input_shape=(1, 8, 16), unet=TINY)


@pytest.mark.parametrize("layout", ["unet", "pipeline"])
def test_a_diffusers_folder_loads_its_config_schedule_and_weights(tmp_path, layout):
    """The diffusers layouts on randomly initialized files: a ``UNet2DModel.save_pretrained`` folder and a
    pipeline folder (``unet/``, ``scheduler/``). Catches: a config read wrongly (another architecture: the
    weights would not load), the stored schedule ignored, and weights that do not reach the network (its
    outputs must be the saved model's)."""
    from diffusers import DDPMScheduler, UNet2DModel

    torch.manual_seed(1)
    saved = UNet2DModel(sample_size=8, in_channels=1, out_channels=2, **TINY).eval()
    unet_dir = tmp_path / "unet" if layout == "pipeline" else tmp_path
    saved.save_pretrained(unet_dir, safe_serialization=True)
    if layout == "pipeline":
        DDPMScheduler(num_train_timesteps=500, beta_end=0.03).save_pretrained(tmp_path / "scheduler")
    config = diffusers_config(tmp_path)
    assert config["learn_sigma"] and config["unet"]["block_out_channels"] == [8, 16]
    denoiser = build_denoiser(config, (1, 8, 8), "test")
    load_diffusers_weights(denoiser, tmp_path)
    x, t = torch.rand(2, 1, 8, 8), torch.tensor([5, 5])
    with torch.no_grad():
        assert torch.equal(denoiser.eval().eps(x, t), saved(x, t).sample[:, :1])
    assert len(denoiser.alphas_cumprod) == (500 if layout == "pipeline" else 1000)
    (unet_dir / "config.json").write_text(json.dumps({**saved.config, "block_out_channels": [8, 32]}))
    with pytest.raises(ValueError, match="does not fit the UNet of its config.json"):
        load_diffusers_weights(build_denoiser(diffusers_config(tmp_path), (1, 8, 8), "test"), tmp_path)


def test_method_diffusion_trains_a_ddpm_and_certify_py_certifies_f_after_one_step(trained_digits, tmp_path):
    """Catches: a DDPM checkpoint that certify.py cannot rebuild, its sigma lost (the loader must set the
    one-step timestep from the checkpoint's sigma), the classifier changed by the DDPM training, and
    certification at another sigma not moving the timestep with it."""
    overrides = [
        "method=diffusion",
        "optim=denoiser",
        "optim.max_epochs=1",
        "data.batch_size=64",
        "method.denoiser.unet.block_out_channels=[8,16]",
        "method.denoiser.unet.norm_num_groups=4",
        f"method.classifier_checkpoint={trained_digits['checkpoint']}",
        "~callbacks.certification",
        "logger=csv",
    ]
    path = train(train_config(tmp_path / "train", overrides))["checkpoint"]
    model, meta = load_classifier(path)
    assert isinstance(model.denoiser, DiffusionDenoiser) and model.denoiser.sigma == 0.25
    assert meta.denoiser["objective"] == "ddpm"
    f = torch.load(trained_digits["checkpoint"], weights_only=True)["state_dict"]
    g = torch.load(path, weights_only=True)["state_dict"]
    assert all(torch.equal(v, g[k]) for k, v in f.items() if k.startswith("model."))
    summary = certify(certify_config(tmp_path / "c", path, SMALL))
    assert summary["settings"]["denoiser"]["model"]["_target_"].endswith("DiffusionDenoiser")
    plan = plan_run(certify_config(tmp_path / "h", path, [*SMALL, "sigma=0.5", "override_sigma=true"]))
    assert plan.model.denoiser.sigma == 0.5 and plan.record.sigma_overridden


def test_certify_py_puts_a_diffusers_folder_in_front_of_a_checkpoints_classifier(trained_digits, tmp_path):
    """Catches: ``diffusion=`` ignored (the counts would be the bare classifier's), the folder and its
    weights' digest not recorded (a run could not say which denoiser it certified), the timestep not set
    from the certification sigma, and a bad folder reaching the certification."""
    from diffusers import UNet2DModel

    torch.manual_seed(2)
    UNet2DModel(sample_size=8, in_channels=1, out_channels=1, **TINY).save_pretrained(tmp_path / "ddpm")
    checkpoint = trained_digits["checkpoint"]
    config = certify_config(tmp_path / "c", checkpoint, [*SMALL, f"diffusion={tmp_path / 'ddpm'}"])
    plan = plan_run(config)
    assert isinstance(plan.model.denoiser, DiffusionDenoiser) and plan.model.denoiser.sigma == 0.25
    summary = certify(config)
    bare = certify(certify_config(tmp_path / "bare", checkpoint, SMALL))
    assert summary["pa_mean"] != bare["pa_mean"]
    recorded = summary["settings"]["denoiser"]
    assert (
        recorded["diffusers"] == str((tmp_path / "ddpm").resolve())
        and len(recorded["diffusers_sha256"]) == 64
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^diffusion=.*empty.* no config.json"):
        plan_run(certify_config(tmp_path / "d", checkpoint, [*SMALL, f"diffusion={tmp_path / 'empty'}"]))
    assert not (tmp_path / "d" / "certify.tsv").exists()
