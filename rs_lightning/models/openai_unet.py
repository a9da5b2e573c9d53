"""The UNet of openai's improved and guided diffusion (Nichol & Dhariwal, ICML 2021, "Improved Denoising
Diffusion Probabilistic Models"; Dhariwal & Nichol, NeurIPS 2021, "Diffusion Models Beat GANs on Image
Synthesis"), written from the papers' description with the parameter names of their released checkpoints
(openai/improved-diffusion and openai/guided-diffusion, ``*/unet.py``), so those ``.pt`` state dicts load
key for key. Carlini et al. (ICLR 2023) denoise with two of them: ``cifar10_uncond_50M_500K.pt`` and
``256x256_diffusion_uncond.pt``.

The network: a sinusoidal timestep embedding through two linear layers (``time_embed``); ``input_blocks``
of residual blocks (GroupNorm(32)–SiLU–conv, the embedding added or, with ``use_scale_shift_norm``, applied
as GroupNorm·(1 + scale) + shift, then GroupNorm–SiLU–dropout–conv, and a skip projection when the width
changes), self-attention at the listed downsampling rates, and a downsampling step between levels (a strided
conv, or a residual block that downsamples with ``resblock_updown``); a ``middle_block`` (residual,
attention, residual); ``output_blocks`` that concatenate the matching input block's features; and ``out``
(GroupNorm–SiLU–conv). Attention splits q, k, v per head after splitting heads ("legacy" order) unless
``use_new_attention_order``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


def timestep_embedding(t: torch.Tensor, dim: int, max_period: float = 10000.0) -> torch.Tensor:
    """[cos(t·f_i), sin(t·f_i)] with f_i = max_period^(−i/half), i < half = dim // 2 (a zero column if dim
    is odd)."""
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    emb = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
    return torch.cat([emb, torch.zeros_like(emb[:, :1])], dim=-1) if dim % 2 else emb


class _Norm(nn.GroupNorm):
    """GroupNorm(32) evaluated in float32, as the released models are."""

    def __init__(self, channels: int) -> None:
        super().__init__(32, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.float()).type(x.dtype)


class _Resample(nn.Module):
    """×2 nearest upsampling then a conv (``conv``), or a stride-2 conv / 2×2 average pool down."""

    def __init__(self, channels: int, up: bool, conv: bool) -> None:
        super().__init__()
        self.up = up
        if up:
            self.conv = nn.Conv2d(channels, channels, 3, padding=1) if conv else None
        else:
            self.op = nn.Conv2d(channels, channels, 3, stride=2, padding=1) if conv else nn.AvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.up:
            return self.op(x)
        x = F.interpolate(x, scale_factor=2, mode="nearest")
        return x if self.conv is None else self.conv(x)


class _ResBlock(nn.Module):
    def __init__(self, channels, emb_channels, dropout, out_channels, scale_shift, up=False, down=False):
        super().__init__()
        self.scale_shift, self.updown = scale_shift, up or down
        self.in_layers = nn.Sequential(
            _Norm(channels), nn.SiLU(), nn.Conv2d(channels, out_channels, 3, padding=1)
        )
        if self.updown:
            self.h_upd = _Resample(channels, up, conv=False)
            self.x_upd = _Resample(channels, up, conv=False)
        self.emb_layers = nn.Sequential(
            nn.SiLU(), nn.Linear(emb_channels, (2 if scale_shift else 1) * out_channels)
        )
        self.out_layers = nn.Sequential(
            _Norm(out_channels),
            nn.SiLU(),
            nn.Dropout(dropout),
            nn.Conv2d(out_channels, out_channels, 3, padding=1),
        )
        self.skip_connection = (
            nn.Identity() if out_channels == channels else nn.Conv2d(channels, out_channels, 1)
        )

    def forward(self, x: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        if self.updown:  # resample between the first norm/activation and the first conv
            h = self.in_layers[2](self.h_upd(self.in_layers[:2](x)))
            x = self.x_upd(x)
        else:
            h = self.in_layers(x)
        e = self.emb_layers(emb).type(h.dtype)[..., None, None]
        if self.scale_shift:
            scale, shift = e.chunk(2, dim=1)
            h = self.out_layers[1:](self.out_layers[0](h) * (1 + scale) + shift)
        else:
            h = self.out_layers(h + e)
        return self.skip_connection(x) + h


class _Attention(nn.Module):
    def __init__(self, channels: int, heads: int, head_channels: int, new_order: bool) -> None:
        super().__init__()
        if head_channels != -1:
            if channels % head_channels:
                raise ValueError(
                    f"{channels} attention channels are not a multiple of num_head_channels={head_channels}"
                )
            heads = channels // head_channels
        self.heads, self.new_order = heads, new_order
        self.norm = _Norm(channels)
        self.qkv = nn.Conv1d(channels, 3 * channels, 1)
        self.proj_out = nn.Conv1d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        qkv = self.qkv(self.norm(x))
        length, ch = qkv.shape[-1], c // self.heads
        if self.new_order:  # q, k, v first, then heads
            q, k, v = (part.reshape(b * self.heads, ch, length) for part in qkv.chunk(3, dim=1))
        else:  # heads first, then q, k, v within each head
            q, k, v = qkv.reshape(b * self.heads, 3 * ch, length).split(ch, dim=1)
        scale = ch**-0.25
        weight = torch.softmax(torch.einsum("bct,bcs->bts", q * scale, k * scale).float(), dim=-1).type(
            q.dtype
        )
        h = torch.einsum("bts,bcs->bct", weight, v).reshape(b, c, length)
        return (x + self.proj_out(h)).reshape(b, c, *spatial)


class _Blocks(nn.ModuleList):
    """One entry of ``input_blocks``/``output_blocks``: layers applied in order, the residual ones with the
    timestep embedding."""

    def forward(self, h: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        for layer in self:
            h = layer(h, emb) if isinstance(layer, _ResBlock) else layer(h)
        return h


class OpenAIUNet(nn.Module):
    """ε_θ(x_t, t) (and, with ``out_channels`` = 2C, the variance's interpolation) of the openai models.

    Args follow their ``UNetModel``: ``attention_resolutions`` are downsampling rates (their scripts turn
    ``--attention_resolutions 16,8`` at image size 32 into rates 2, 4); ``num_head_channels`` ≠ −1 fixes the
    channels per head instead of ``num_heads``. Class-conditional models are not supported.
    """

    def __init__(
        self,
        *,
        in_channels: int,
        model_channels: int,
        out_channels: int,
        num_res_blocks: int,
        attention_resolutions: Sequence[int],
        channel_mult: Sequence[float],
        dropout: float = 0.0,
        conv_resample: bool = True,
        num_heads: int = 1,
        num_head_channels: int = -1,
        num_heads_upsample: int = -1,
        use_scale_shift_norm: bool = False,
        resblock_updown: bool = False,
        use_new_attention_order: bool = False,
    ) -> None:
        super().__init__()
        self.model_channels = model_channels
        emb = 4 * model_channels
        heads_up = num_heads if num_heads_upsample == -1 else num_heads_upsample
        self.time_embed = nn.Sequential(nn.Linear(model_channels, emb), nn.SiLU(), nn.Linear(emb, emb))

        def res(cin, cout, **updown):
            return _ResBlock(cin, emb, dropout, cout, use_scale_shift_norm, **updown)

        def attn(ch, heads):
            return _Attention(ch, heads, num_head_channels, use_new_attention_order)

        ch = int(channel_mult[0] * model_channels)
        first = ch
        self.input_blocks = nn.ModuleList([_Blocks([nn.Conv2d(in_channels, ch, 3, padding=1)])])
        skips, rate = [ch], 1
        for level, mult in enumerate(channel_mult):
            for _ in range(num_res_blocks):
                layers = [res(ch, int(mult * model_channels))]
                ch = int(mult * model_channels)
                if rate in attention_resolutions:
                    layers.append(attn(ch, num_heads))
                self.input_blocks.append(_Blocks(layers))
                skips.append(ch)
            if level != len(channel_mult) - 1:
                down = (
                    res(ch, ch, down=True) if resblock_updown else _Resample(ch, up=False, conv=conv_resample)
                )
                self.input_blocks.append(_Blocks([down]))
                skips.append(ch)
                rate *= 2
        self.middle_block = _Blocks([res(ch, ch), attn(ch, num_heads), res(ch, ch)])
        self.output_blocks = nn.ModuleList()
        for level, mult in reversed(list(enumerate(channel_mult))):
            for i in range(num_res_blocks + 1):
                layers = [res(ch + skips.pop(), int(model_channels * mult))]
                ch = int(model_channels * mult)
                if rate in attention_resolutions:
                    layers.append(attn(ch, heads_up))
                if level and i == num_res_blocks:
                    up = (
                        res(ch, ch, up=True)
                        if resblock_updown
                        else _Resample(ch, up=True, conv=conv_resample)
                    )
                    layers.append(up)
                    rate //= 2
                self.output_blocks.append(_Blocks(layers))
        self.out = nn.Sequential(_Norm(ch), nn.SiLU(), nn.Conv2d(first, out_channels, 3, padding=1))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = self.time_embed(timestep_embedding(t, self.model_channels))
        h, skips = x, []
        for block in self.input_blocks:
            h = block(h, emb)
            skips.append(h)
        h = self.middle_block(h, emb)
        for block in self.output_blocks:
            h = block(torch.cat([h, skips.pop()], dim=1), emb)
        return self.out(h)


CHANNEL_MULT = {
    512: (0.5, 1, 1, 2, 2, 4, 4),
    256: (1, 1, 2, 2, 4, 4),
    128: (1, 1, 2, 3, 4),
    64: (1, 2, 3, 4),
    32: (1, 2, 2, 2),
}
"""Their scripts' per-image-size channel multipliers (``channel_mult=""``; 32 is improved-diffusion's)."""


def unet_arguments(flags: dict, in_channels: int) -> dict:
    """:class:`OpenAIUNet` arguments from the flags of the openai scripts (their READMEs' ``MODEL_FLAGS``:
    ``image_size``, ``num_channels``, ``num_res_blocks``, ``attention_resolutions`` "16,8", ``channel_mult``
    "" for the per-size default, ``learn_sigma``, ``dropout``, ``num_heads``, ``num_head_channels``,
    ``num_heads_upsample``, ``use_scale_shift_norm``, ``resblock_updown``, ``use_new_attention_order``);
    flags left out take their scripts' defaults (``model_and_diffusion_defaults``);
    ValueError for a class-conditional model or an image size without a default ``channel_mult``."""
    size = int(flags["image_size"])
    if flags.get("class_cond"):
        raise ValueError("class_cond=True: class-conditional diffusion models are not supported")
    mult = flags.get("channel_mult") or ""
    if mult:
        mult = tuple(float(m) for m in str(mult).split(","))
    else:
        if size not in CHANNEL_MULT:
            raise ValueError(
                f"image_size={size} has no default channel_mult; give channel_mult, e.g. '1,2,2'"
            )
        mult = CHANNEL_MULT[size]
    resolutions = [int(r) for r in str(flags.get("attention_resolutions", "16,8")).split(",") if r]
    return {
        "in_channels": in_channels,
        "model_channels": int(flags["num_channels"]),
        "out_channels": (2 if flags.get("learn_sigma") else 1) * in_channels,
        "num_res_blocks": int(flags["num_res_blocks"]),
        "attention_resolutions": [size // r for r in resolutions],
        "channel_mult": list(mult),
        "dropout": float(flags.get("dropout", 0.0)),
        "num_heads": int(flags.get("num_heads", 4)),
        "num_head_channels": int(flags.get("num_head_channels", -1)),
        "num_heads_upsample": int(flags.get("num_heads_upsample", -1)),
        "use_scale_shift_norm": bool(flags.get("use_scale_shift_norm", True)),
        "resblock_updown": bool(flags.get("resblock_updown", False)),
        "use_new_attention_order": bool(flags.get("use_new_attention_order", False)),
    }
