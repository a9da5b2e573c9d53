"""A PNG of what an ARS pipeline (Lyu et al., NeurIPS 2024) does to a few test images.

    python scripts/ars_masks.py CHECKPOINT --out masks.png [--inputs 6] [--skip 1000] [--seed 0]

One row per test image (idx 0, skip, 2·skip, …, of the checkpoint's own test split): the clean canvas x,
the first query m₁ = x + σ₁ε₁ (all the mask network sees), the mask w = mask(m₁) in [0, 1], and the
averaged input x̂ the classifier reads, with the per-image σ₂ in the title. The noise is the certification
stream of input idx (seed, idx, estimation phase, first block), so the figure shows draws certify.py uses.
Standard output: one line per image with the numbers in its titles (mask mean, σ₂), which docs/results.md
quotes (evidence/ars_clutter/ars_clutter.sh keeps them beside the PNG). Errors: one line ``error: …``,
exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from rs_lightning.cli.common import checkpoint_datamodule  # noqa: E402
from rs_lightning.models.ars import AdaptiveSmoothing, query_sigmas, step2_sigma  # noqa: E402
from rs_lightning.models.checkpoint import CheckpointError, load_classifier  # noqa: E402
from rs_lightning.smoothing import Phase  # noqa: E402
from rs_lightning.smoothing.noise import standard_noise_block  # noqa: E402


def mask_figure(pipeline: AdaptiveSmoothing, dataset, indices: list[int], seed: int = 0):
    """The figure (columns x, m₁, w, x̂ for each idx) and one line per idx with its mask mean and σ₂."""
    shape = tuple(dataset[indices[0]][0].shape)
    fig, axes = plt.subplots(len(indices), 4, figsize=(8, 2.1 * len(indices)), squeeze=False)
    lines = []
    s1, s2_base = query_sigmas(pipeline.sigma, pipeline.first_query_budget_frac)
    for row, idx in zip(axes, indices, strict=True):
        x, label = dataset[idx]
        noise = standard_noise_block(
            seed, idx, int(Phase.ESTIMATION), 0, 1, (pipeline.noise_draws, *shape), device=torch.device("cpu")
        )
        with torch.no_grad():
            x_hat, w = pipeline.queries(x[None], noise)
        w = w.detach()  # static: a view of the mask parameter, which keeps requires_grad even under no_grad
        m1 = x[None] + s1 * noise[:, 0] if pipeline.mode == "ars" else x[None]
        ars = pipeline.mode == "ars"
        s2 = float(step2_sigma(w, s2_base, pipeline.channels, pipeline.dim)) if ars else None
        panels = [
            (x, f"idx {idx} (label {label})"),
            (m1[0], "first query m₁" if pipeline.mode == "ars" else "(no first query)"),
            (w[0], f"mask w (mean {float(w.mean()):.2f})"),
            (x_hat[0], "x̂" + (f" (σ₂ = {s2:.3f})" if s2 is not None else "")),
        ]
        lines.append(
            f"idx {idx} label {label}: mask mean {float(w.mean()):.4f}"
            + (f", sigma2 {s2:.4f}" if s2 is not None else "")
        )
        for ax, (image, title) in zip(row, panels, strict=True):
            array = image.clamp(0, 1).permute(1, 2, 0).squeeze(-1).numpy()
            ax.imshow(array, cmap="gray" if array.ndim == 2 else None, vmin=0, vmax=1)
            ax.set_title(title, fontsize=8)
            ax.axis("off")
    fig.suptitle(
        f"ARS ({pipeline.mode}), σ = {pipeline.sigma:g}, f = {pipeline.first_query_budget_frac:g}", fontsize=9
    )
    fig.tight_layout()
    return fig, lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Masks of an ARS checkpoint on a few test images.")
    parser.add_argument("checkpoint")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--inputs", type=int, default=6)
    parser.add_argument("--skip", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        if args.inputs < 1 or args.skip < 1 or args.seed < 0:
            bad = f"--inputs {args.inputs}, --skip {args.skip}, --seed {args.seed}"
            raise ValueError(f"{bad}: need >= 1, >= 1 and >= 0")
        pipeline, meta = load_classifier(args.checkpoint)
        if not isinstance(pipeline, AdaptiveSmoothing) or pipeline.mode == "vanilla":
            raise CheckpointError(f"{args.checkpoint} holds no ARS mask (train: method=ars|ars_static)")
        data = checkpoint_datamodule({"data": None}, meta)
        dataset = data.dataset("test")
        indices = [i * args.skip for i in range(args.inputs) if i * args.skip < len(dataset)]
        args.out.parent.mkdir(parents=True, exist_ok=True)
        fig, lines = mask_figure(pipeline.eval(), dataset, indices, args.seed)
        fig.savefig(args.out, dpi=110)
    except (CheckpointError, ValueError, OSError) as err:
        print(f"error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    print("\n".join([f"masks: {args.out} ({pipeline.mode}, sigma {pipeline.sigma:g})", *lines]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
