"""The openai improved/guided-diffusion UNet (rs_lightning.models.openai_unet) and its one-shot denoising.

The fixtures in tests/data/openai_diffusion were written by make_fixture.py there with the reference code
(openai/improved-diffusion 1bc7bbb, openai/guided-diffusion 22e0df8): each holds the reference model's
state-dict layout (names and shapes, in order), its flags, and for weights drawn in that order from
``torch.Generator`` seed 0 (randn · 0.05) two inputs x_t, their timesteps and the reference's
``p_sample(...)["pred_xstart"]`` (clipped and not). So the comparison is against the reference's own
numbers, not against this implementation.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rs_testing import SMALL, certify_config

from rs_lightning.cli.certify import certify, plan_run
from rs_lightning.models.diffusion import DiffusionDenoiser, load_openai_weights, openai_model
from rs_lightning.models.openai_unet import OpenAIUNet, unet_arguments
from rs_lightning.validation import ConfigError

FIXTURES = Path(__file__).parents[1] / "data" / "openai_diffusion"


def reference_weights(layout) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {name: torch.randn(shape, generator=g) * 0.05 for name, shape in layout}


@pytest.mark.parametrize("name", ["improved_cifar_like", "guided_imagenet_like"])
@pytest.mark.parametrize("clip", [True, False])
def test_a_released_layout_loads_and_denoises_as_the_reference_does(name, clip, tmp_path):
    """Catches: a key or shape that differs from the released checkpoints (the file would not load), heads
    split in the wrong order, scale-shift norm applied as an addition, resblock up/downsampling in the wrong
    place, the timestep not rescaled to 1000/T (improved-diffusion) or rescaled when it must not be
    (guided), the cosine or rescaled-linear schedule wrong, the variance channels read as ε, and x̂₀'s
    formula or clipping off. Each changes x̂₀ by far more than the 1e-4 allowed here (the reference's own
    float32 rounding is ~1e-6)."""
    fixture = torch.load(FIXTURES / f"{name}.pt", weights_only=True)
    flags = json.loads(fixture["flags"])
    size = flags["image_size"]
    torch.save(reference_weights(json.loads(fixture["layout"])), tmp_path / "model.pt")
    denoiser = DiffusionDenoiser(input_shape=(3, size, size), openai=flags, clip=clip).eval()
    load_openai_weights(denoiser, tmp_path / "model.pt")
    with torch.no_grad():
        x0 = denoiser.predict_x0(fixture["x_t"], fixture["t"])
    expected = fixture["pred_xstart" if clip else "pred_xstart_unclipped"]
    assert expected.abs().max() > 0.5  # the fixture is not degenerate
    torch.testing.assert_close(x0, expected, atol=1e-4, rtol=1e-4)


def test_flags_are_read_as_the_reference_scripts_do():
    """Catches: attention resolutions used as rates (their scripts turn 16,8 at size 32 into rates 2, 4), the
    per-size channel multipliers, the learned-variance output width, and the schedules' parameters."""
    args = unet_arguments(
        {"image_size": 32, "num_channels": 128, "num_res_blocks": 3, "learn_sigma": True}, 3
    )
    assert args["attention_resolutions"] == [2, 4] and args["channel_mult"] == [1, 2, 2, 2]
    assert args["out_channels"] == 6 and args["num_heads"] == 4 and args["use_scale_shift_norm"]
    flags = {
        "image_size": 32,
        "num_channels": 32,
        "num_res_blocks": 1,
        "rescale_timesteps": True,
        "diffusion_steps": 4000,
        "noise_schedule": "linear",
    }
    _, schedule, scale = openai_model(flags, (3, 32, 32))
    assert scale == 0.25 and schedule["beta_start"] == pytest.approx(2.5e-5) and schedule["beta_end"] == 0.005


BASE_8 = {
    "image_size": 8,
    "num_channels": 32,
    "num_res_blocks": 1,
    "channel_mult": "1,2",
    "rescale_timesteps": 0,
}


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        ({k: v for k, v in BASE_8.items() if k != "rescale_timesteps"}, "rescale_timesteps"),
        ({k: v for k, v in BASE_8.items() if k != "channel_mult"}, "channel_mult"),
        ({**BASE_8, "image_size": 16}, "image_size=16"),
        ({**BASE_8, "class_cond": True}, "class-conditional"),
        ({**BASE_8, "noise_schedule": "sigmoid"}, "noise_schedule"),
    ],
)
def test_unusable_flags_are_refused_by_name(flags, match):
    with pytest.raises(ValueError, match=match):
        DiffusionDenoiser(input_shape=(1, 8, 8), openai=flags)


FLAGS_8 = {
    "image_size": 8,
    "num_channels": 32,
    "num_res_blocks": 1,
    "channel_mult": "1,2",
    "attention_resolutions": "4",
    "learn_sigma": True,
    "rescale_timesteps": False,
}


def test_certify_py_puts_an_openai_checkpoint_in_front_of_a_classifier(trained_digits, tmp_path):
    """Catches: the .pt file ignored or loaded under other flags, its digest not recorded, the timestep not
    following the certification sigma, a missing ``diffusion_flags``, flags that do not fit the file, and
    a pickle that is not a plain state dict reaching the certification."""
    torch.manual_seed(3)
    unet = OpenAIUNet(**unet_arguments(FLAGS_8, 1))
    with torch.no_grad():
        for p in unet.parameters():
            p.normal_(0, 0.05)
    torch.save(unet.state_dict(), tmp_path / "model.pt")
    checkpoint = trained_digits["checkpoint"]
    flags = [f"+diffusion_flags.{k}={json.dumps(v) if isinstance(v, str) else v}" for k, v in FLAGS_8.items()]
    config = certify_config(
        tmp_path / "c", checkpoint, [*SMALL, f"diffusion={tmp_path / 'model.pt'}", *flags]
    )
    plan = plan_run(config)
    assert plan.model.denoiser.openai and plan.model.denoiser.sigma == 0.25
    assert torch.equal(plan.model.denoiser.unet.out[2].weight, unet.out[2].weight)
    summary = certify(config)
    assert len(summary["settings"]["denoiser"]["diffusers_sha256"]) == 64
    assert summary["settings"]["denoiser"]["model"]["openai"]["channel_mult"] == "1,2"

    with pytest.raises(ConfigError, match=r"^diffusion_flags=None .*256x256_diffusion_uncond"):
        plan_run(certify_config(tmp_path / "d", checkpoint, [*SMALL, f"diffusion={tmp_path / 'model.pt'}"]))
    wrong = [f.replace("num_res_blocks=1", "num_res_blocks=2") for f in flags]
    with pytest.raises(ConfigError, match=r"^diffusion=.*does not fit the UNet of its flags"):
        plan_run(
            certify_config(tmp_path / "e", checkpoint, [*SMALL, f"diffusion={tmp_path / 'model.pt'}", *wrong])
        )
    torch.save({"model": unet}, tmp_path / "pickled.pt")
    with pytest.raises(ConfigError, match=r"^diffusion=.*not a readable state dict"):
        plan_run(
            certify_config(
                tmp_path / "f", checkpoint, [*SMALL, f"diffusion={tmp_path / 'pickled.pt'}", *flags]
            )
        )
    assert not any((tmp_path / d / "certify.tsv").exists() for d in "def")
