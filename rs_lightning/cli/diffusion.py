"""``certify.py diffusion=FOLDER``: diffusion denoised smoothing (Carlini et al., ICLR 2023), a diffusers or
openai DDPM's one-shot denoising D in front of the checkpoint's classifier f, certified as f∘D."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from rs_lightning.models.checkpoint import CheckpointMeta, build_denoiser
from rs_lightning.validation import ConfigError

from .common import file_sha256


def with_diffusion(cfg: DictConfig, model, meta: CheckpointMeta, sigma: float, device: torch.device):
    """``diffusion=FOLDER``: ``(f∘D, metadata recording D)``, with D the one-shot denoising of the diffusers
    DDPM in FOLDER (:mod:`rs_lightning.models.diffusion`) in front of the checkpoint's classifier f; D's
    timestep follows the certification sigma. ``(model, meta)`` unchanged without it."""
    from rs_lightning.models.denoisers import DenoisedClassifier
    from rs_lightning.models.diffusion import (
        DiffusionDenoiser,
        diffusers_config,
        load_diffusers_weights,
        load_openai_weights,
    )

    folder = cfg.get("diffusion")
    if folder is None:
        return model, meta
    if meta.denoiser is not None or meta.pipeline is not None:
        raise ConfigError(
            "diffusion", folder, "null for this checkpoint", "it already holds a denoiser or a pipeline"
        )
    flags = cfg.get("diffusion_flags")
    openai = Path(folder).is_file()
    if openai and flags is None:
        raise ConfigError(
            "diffusion_flags",
            None,
            "the flags of the openai model in this file",
            "e.g. diffusion_flags=256x256_diffusion_uncond (presets in conf/diffusion_flags)",
        )
    try:
        if openai:
            config = {
                "_target_": f"{DiffusionDenoiser.__module__}.DiffusionDenoiser",
                "openai": OmegaConf.to_container(flags, resolve=True),
            }
            denoiser = build_denoiser(config, meta.input_shape, str(folder))
            load_openai_weights(denoiser, folder)
            weights = Path(folder)
        else:
            config = diffusers_config(folder)
            denoiser = build_denoiser(config, meta.input_shape, str(folder))
            load_diffusers_weights(denoiser, folder)
            weights = next(Path(folder).glob("**/diffusion_pytorch_model.safetensors"))
    except (ValueError, ImportError) as err:
        expected = (
            "an openai improved/guided-diffusion state dict matching diffusion_flags"
            if openai
            else "a diffusers UNet2DModel folder (config.json and its safetensors weights)"
        )
        raise ConfigError("diffusion", folder, expected, " ".join(str(err).split())) from err
    record = {
        "model": config,
        "sigma": sigma,
        "objective": None,
        "diffusers": str(Path(folder).resolve()),
        "diffusers_sha256": file_sha256(weights),
    }
    denoiser.sigma = float(sigma)  # built here for this run: its timestep is chosen by the certification σ
    model = DenoisedClassifier(denoiser.to(device).eval(), model)
    return model, dataclasses.replace(meta, denoiser=record)
