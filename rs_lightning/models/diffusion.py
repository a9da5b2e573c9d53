"""One-shot diffusion denoising (Carlini, Tramèr, Dvijotham, Rice, Sun & Kolter, ICLR 2023, "(Certified!!)
Adversarial Robustness for Free!", Algorithm 1; ethz-spylab/diffusion_denoised_smoothing): an off-the-shelf
DDPM (Ho, Jain & Abbeel, NeurIPS 2020) as the denoiser D of denoised smoothing.

For a noisy input x̃ = x + δ, δ ~ N(0, σ²I), in [0,1] pixel space:

1. map to [−1, 1]: z = 2x̃ − 1 = (2x − 1) + 2δ, noise of standard deviation 2σ;
2. take the timestep t* at which the forward process has that noise-to-signal ratio, ᾱ_{t*} = 1/(1 + 4σ²)
   (the first timestep whose √((1 − ᾱ_t)/ᾱ_t) reaches 2σ);
3. scale: x_{t*} = √ᾱ_{t*} · z, distributed as the forward process at t* (up to the discretization of t);
4. one step: x̂₀ = (x_{t*} − √(1 − ᾱ_{t*}) ε_θ(x_{t*}, t*)) / √ᾱ_{t*}, clipped to [−1, 1];
5. back to [0, 1]: (x̂₀ + 1)/2, which the classifier f reads.

D is a deterministic function of x̃ (one step, no sampling noise), so f∘D is a base classifier like any
other and the certificate is Cohen et al.'s at σ, whatever D does; t* only decides how well D denoises. The
network is a ``diffusers`` ``UNet2DModel`` predicting ε, its ᾱ schedule a ``DDPMScheduler``'s, both from
arguments (no hub).
``learn_sigma`` models (improved DDPM, Nichol & Dhariwal 2021) output 2C channels, the first C being ε.
With ``openai=`` flags the network is instead the UNet of openai's improved/guided diffusion
(:mod:`rs_lightning.models.openai_unet`), whose released ``.pt`` state dicts :func:`load_openai_weights`
reads, and the schedule is theirs (linear or cosine over ``diffusion_steps``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ._shape import chw
from .openai_unet import OpenAIUNet, unet_arguments

SMALL_UNET = {
    "block_out_channels": [32, 64],
    "down_block_types": ["DownBlock2D", "AttnDownBlock2D"],
    "up_block_types": ["AttnUpBlock2D", "UpBlock2D"],
    "layers_per_block": 1,
    "norm_num_groups": 8,
}
"""The default UNet: two levels (32, 64 channels, attention at the lower), small enough to train on a CPU."""

LINEAR_SCHEDULE = {
    "num_train_timesteps": 1000,
    "beta_start": 1e-4,
    "beta_end": 0.02,
    "beta_schedule": "linear",
}
"""Ho et al.'s schedule (β linear from 1e-4 to 0.02 over 1000 steps), the default."""


def one_shot_timestep(alphas_cumprod: torch.Tensor, sigma: float) -> int:
    """t*: the first timestep whose noise-to-signal ratio √((1 − ᾱ_t)/ᾱ_t) reaches 2σ (σ in [0,1] pixels);
    the last timestep if none does."""
    ratio = ((1 - alphas_cumprod) / alphas_cumprod).sqrt()
    reached = torch.nonzero(ratio >= 2 * float(sigma))
    return int(reached[0]) if len(reached) else len(alphas_cumprod) - 1


class DiffusionDenoiser(nn.Module):
    """D(x̃) by one denoising step of a DDPM (module docstring), at the noise level :attr:`sigma` (the σ of the
    noisy inputs, set where it is built: by the method, the checkpoint loader or certify.py's ``diffusion=``).

    Args:
        input_shape: (C, H, W) of the images; the UNet's ``sample_size`` is H (H = W).
        unet: ``UNet2DModel`` arguments besides ``sample_size``/``in_channels``/``out_channels`` (defaults
            :data:`SMALL_UNET`).
        schedule: ``DDPMScheduler`` arguments (default :data:`LINEAR_SCHEDULE`).
        learn_sigma: the network outputs 2C channels (ε, then the variance's), as the openai models do.
        clip: clip x̂₀ to [−1, 1] (as the reference's ``clip_denoised=True``).
        openai: the flags of an openai improved/guided-diffusion model (their READMEs' ``MODEL_FLAGS`` and
            ``diffusion_steps``, ``noise_schedule``, and ``rescale_timesteps``, which must be given: their
            improved-diffusion scripts default it to true, guided-diffusion's to false) instead of ``unet``,
            ``schedule`` and ``learn_sigma``.
    """

    follows_sigma = True
    """Its timestep is chosen by the σ it is certified at (:func:`~rs_lightning.smoothing.pipeline.at_sigma`
    certifies a copy at another σ than its training one)."""

    def __init__(
        self,
        *,
        input_shape: Sequence[int],
        unet: Mapping[str, Any] | None = None,
        schedule: Mapping[str, Any] | None = None,
        learn_sigma: bool = False,
        clip: bool = True,
        openai: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from diffusers import UNet2DModel

        c, h, w = chw(input_shape)
        if h != w:
            raise ValueError(f"DiffusionDenoiser needs square images (UNet2DModel sample_size), got {h}x{w}")
        self.timestep_scale, self.openai = 1.0, openai is not None
        if openai is not None:
            if unet is not None or schedule is not None:
                raise ValueError("give either openai flags or unet/schedule arguments, not both")
            unet_args, schedule, self.timestep_scale = openai_model(openai, input_shape)
            self.channels, self.learn_sigma, self.clip = c, unet_args["out_channels"] == 2 * c, bool(clip)
            self.unet = OpenAIUNet(**unet_args)
            self.register_buffer("alphas_cumprod", _alphas_cumprod(schedule), persistent=False)
            self.sigma: float | None = None
            return
        arguments = {
            k: list(v) if isinstance(v, list | tuple) else v for k, v in (unet or SMALL_UNET).items()
        }
        for key in ("sample_size", "in_channels", "out_channels"):
            if key in arguments:
                raise ValueError(f"unet.{key} comes from the data's input shape; leave it out")
        self.channels, self.learn_sigma, self.clip = c, bool(learn_sigma), bool(clip)
        self.unet = UNet2DModel(
            sample_size=h, in_channels=c, out_channels=2 * c if self.learn_sigma else c, **arguments
        )
        self.register_buffer("alphas_cumprod", _alphas_cumprod(schedule or LINEAR_SCHEDULE), persistent=False)
        self.sigma: float | None = None
        """The σ of the noisy inputs, which picks t*."""

    def eps(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """ε_θ(x_t, t), the first C output channels."""
        if self.openai:  # their rescale_timesteps feeds t * 1000 / T
            return self.unet(x_t, t.float() * self.timestep_scale)[:, : self.channels]
        return self.unet(x_t, t).sample[:, : self.channels]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sigma is None or not math.isfinite(self.sigma) or self.sigma <= 0:
            raise ValueError(
                f"DiffusionDenoiser.sigma={self.sigma!r}: set the noise level of its inputs first"
            )
        t = one_shot_timestep(self.alphas_cumprod, self.sigma)
        x_t = self.alphas_cumprod[t].sqrt() * (2 * x - 1)
        steps = torch.full((x.shape[0],), t, device=x.device, dtype=torch.long)
        return (self.predict_x0(x_t, steps) + 1) / 2

    def predict_x0(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """x̂₀ = (x_t − √(1 − ᾱ_t) ε_θ(x_t, t))/√ᾱ_t in [−1, 1] units (clipped with :attr:`clip`); ``t`` a
        batch of integer timesteps (the reference's ``p_sample(...)["pred_xstart"]``)."""
        alpha_bar = self.alphas_cumprod[t].view(-1, *([1] * (x_t.dim() - 1))).to(x_t.dtype)
        x0 = (x_t - (1 - alpha_bar).sqrt() * self.eps(x_t, t)) / alpha_bar.sqrt()
        return x0.clamp(-1, 1) if self.clip else x0

    def ddpm_loss(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Ho et al.'s simple loss (Algorithm 1) on clean images ``x`` in [0,1]:
        ‖ε − ε_θ(√ᾱ_t x₀ + √(1 − ᾱ_t) ε, t)‖², mean over pixels, x₀ = 2x − 1, t uniform over the
        timesteps, ε ~ N(0, I) (both from ``generator``)."""
        t = torch.randint(0, len(self.alphas_cumprod), (x.shape[0],), generator=generator, device=x.device)
        noise = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        alpha_bar = self.alphas_cumprod[t].view(-1, 1, 1, 1).to(x.dtype)
        x_t = alpha_bar.sqrt() * (2 * x - 1) + (1 - alpha_bar).sqrt() * noise
        return nn.functional.mse_loss(self.eps(x_t, t), noise)


def _alphas_cumprod(schedule: Mapping[str, Any]) -> torch.Tensor:
    """ᾱ_t of a ``DDPMScheduler`` with these arguments (float32)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(**schedule).alphas_cumprod.float().clone()


def openai_model(flags: Mapping[str, Any], input_shape: Sequence[int]) -> tuple[dict, dict, float]:
    """(:class:`OpenAIUNet` arguments, ``DDPMScheduler`` arguments, timestep scale) of openai flags.

    Their schedules: ``linear`` has betas from 1e-4·1000/T to 0.02·1000/T (Ho et al.'s, rescaled to T steps),
    ``cosine`` is Nichol & Dhariwal's ᾱ_t ∝ cos²((t/T + 0.008)/1.008 · π/2) with betas capped at 0.999
    (diffusers' ``squaredcos_cap_v2``). ValueError for a missing or unsupported flag."""
    c, h, _ = chw(input_shape)
    flags = dict(flags)
    if "rescale_timesteps" not in flags:
        raise ValueError(
            "openai flags need rescale_timesteps: true for improved-diffusion models (its scripts' default), "
            "false for guided-diffusion's"
        )
    if int(flags.get("image_size", h)) != h:
        raise ValueError(f"openai image_size={flags['image_size']} but the classifier's inputs are {h}x{h}")
    flags["image_size"] = h
    steps = int(flags.get("diffusion_steps", 1000))
    kind = flags.get("noise_schedule", "linear")
    if kind == "linear":
        schedule = {
            "num_train_timesteps": steps,
            "beta_start": 1e-4 * 1000 / steps,
            "beta_end": 0.02 * 1000 / steps,
            "beta_schedule": "linear",
        }
    elif kind == "cosine":
        schedule = {"num_train_timesteps": steps, "beta_schedule": "squaredcos_cap_v2"}
    else:
        raise ValueError(f"noise_schedule={kind!r}: the openai models use linear or cosine")
    scale = 1000.0 / steps if flags["rescale_timesteps"] else 1.0
    return unet_arguments(flags, c), schedule, scale


def load_openai_weights(denoiser: DiffusionDenoiser, path: str | Path) -> None:
    """A released openai improved/guided-diffusion state dict (``torch.load(weights_only=True)``: tensors
    only, no code) into ``denoiser`` built with ``openai=`` flags; ValueError naming the file and the first
    mismatch (wrong flags show up here as missing or misshapen tensors)."""
    path = Path(path)
    if not denoiser.openai:
        raise ValueError(
            f"{path} is an openai diffusion checkpoint; build the denoiser with its openai flags"
        )
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # unreadable, or pickled objects other than tensors
        raise ValueError(
            f"{path} is not a readable state dict of tensors ({type(err).__name__}: {err})"
        ) from err
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{path} is not a state dict (a mapping of names to tensors)")
    _load_matching(denoiser.unet, dict(state), path, "the UNet of its flags")


def _load_matching(module: nn.Module, state: dict, path: Path, what: str) -> None:
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    extra = [k for k in state if k not in own]
    shaped = [k for k in own if k in state and state[k].shape != own[k].shape]
    if missing or extra or shaped:
        first = (shaped or missing or extra)[0]
        raise ValueError(
            f"{path} does not fit {what}: {len(missing)} missing, {len(extra)} "
            f"unexpected, {len(shaped)} misshapen tensors (first {first})"
        )
    module.load_state_dict({k: v.float() for k, v in state.items()})


def diffusers_config(folder: str | Path) -> dict[str, Any]:
    """The :class:`DiffusionDenoiser` config of a diffusers folder: a ``UNet2DModel.save_pretrained`` folder
    (``config.json``, ``diffusion_pytorch_model.safetensors``) or a pipeline's, with ``unet/`` and
    ``scheduler/scheduler_config.json``. Only the JSON is read here; ValueError naming the file otherwise."""
    folder = Path(folder)
    unet_dir = folder / "unet" if (folder / "unet" / "config.json").is_file() else folder
    path = unet_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"{folder} is not a diffusers folder: no config.json (nor unet/config.json)")
    try:
        config = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path} is not readable JSON ({err})") from err
    if config.get("_class_name", "UNet2DModel") != "UNet2DModel":
        raise ValueError(f"{path} describes a {config.get('_class_name')}, not a UNet2DModel")
    out, channels = config.get("out_channels"), config.get("in_channels")
    unet = {
        k: v
        for k, v in config.items()
        if not k.startswith("_") and k not in ("sample_size", "in_channels", "out_channels")
    }
    schedule = dict(LINEAR_SCHEDULE)
    scheduler_path = folder / "scheduler" / "scheduler_config.json"
    if scheduler_path.is_file():
        stored = json.loads(scheduler_path.read_text())
        schedule = {k: stored[k] for k in LINEAR_SCHEDULE if k in stored}
    return {
        "_target_": f"{DiffusionDenoiser.__module__}.{DiffusionDenoiser.__qualname__}",
        "unet": unet,
        "schedule": schedule,
        "learn_sigma": bool(out == 2 * channels),
    }


def load_diffusers_weights(denoiser: DiffusionDenoiser, folder: str | Path) -> None:
    """The UNet weights of a diffusers folder (``diffusion_pytorch_model.safetensors``, read by
    safetensors: no pickle) into ``denoiser``; ValueError naming the file and the first mismatch."""
    from safetensors.torch import load_file

    folder = Path(folder)
    unet_dir = folder / "unet" if (folder / "unet" / "config.json").is_file() else folder
    path = unet_dir / "diffusion_pytorch_model.safetensors"
    if not path.is_file():
        raise ValueError(
            f"{unet_dir} holds no diffusion_pytorch_model.safetensors (only safetensors is read)"
        )
    _load_matching(denoiser.unet, load_file(str(path)), path, "the UNet of its config.json")
