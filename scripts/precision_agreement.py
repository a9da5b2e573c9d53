"""How much reduced precision changes the base classifier: argmax agreement on noisy inputs, certified rows.

    python scripts/precision_agreement.py samples CHECKPOINT [--inputs 100] [--samples 1000] [--skip K]
                                          [--out FILE]
    python scripts/precision_agreement.py runs FP32_RUN OTHER_RUN

``samples``: for ``--inputs`` test inputs (every ``--skip``-th, default evenly spaced) draws ``--samples``
noisy copies from certify.py's own estimation noise stream (seed 0) and classifies each copy with the fp32
network and at every ``--settings`` (``bf16``, ``bf16+cl`` = bf16 with channels_last, ``fp32+cl``):
the share of noisy samples whose predicted class differs, how many inputs see any difference, and per input
(``idx``, ``per_input``: that input's count of differing samples per setting) the rows behind those sums.
``runs``: compares two certify.py folders certified on the same inputs (e.g. precision=32 and bf16): how many
certified results change (class, abstention, radius) and by how much. Prints JSON. Used for the README.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rs_lightning.analysis.run_view import load_run
from rs_lightning.cli.common import checkpoint_datamodule, file_sha256
from rs_lightning.data.subset import evenly_spaced, subset_indices
from rs_lightning.models.checkpoint import load_classifier
from rs_lightning.smoothing import BaseClassifier, Phase
from rs_lightning.smoothing.noise import block_sizes, standard_noise_block

SETTINGS = {
    "bf16": {"precision": "bf16"},
    "bf16+cl": {"precision": "bf16", "channels_last": True},
    "fp32+cl": {"precision": "32", "channels_last": True},
}


@torch.inference_mode()
def sample_agreement(
    checkpoint: str, inputs: int, samples: int, skip: int | None, settings, batch: int
) -> dict:
    model, meta = load_classifier(checkpoint)
    dataset = checkpoint_datamodule(OmegaConf.create({"data": None}), meta).dataset("test")
    indices = (
        evenly_spaced(len(dataset), inputs) if skip is None else subset_indices(len(dataset), skip)[:inputs]
    )
    sigma = float(meta.sigma)
    others = {name: BaseClassifier(model, **SETTINGS[name]) for name in settings}
    per_input = {name: [] for name in settings}
    generator = torch.Generator()
    for index in indices:
        x = dataset[index][0]
        seen = {name: 0 for name in settings}
        for block, rows in enumerate(block_sizes(samples)):
            noise = standard_noise_block(
                0,
                index,
                int(Phase.ESTIMATION),
                block,
                rows,
                tuple(x.shape),
                device=torch.device("cpu"),
                generator=generator,
            )
            noisy = noise.mul_(sigma).add_(x)
            for start in range(0, rows, batch):
                part = noisy[start : start + batch]
                reference = model(part).argmax(1)
                for name, other in others.items():
                    seen[name] += int((other(part).argmax(1) != reference).sum())
        for name in settings:
            per_input[name].append(seen[name])
    total = len(indices) * samples
    return {
        "checkpoint": checkpoint,
        "checkpoint_sha256": file_sha256(Path(checkpoint)),
        "sigma": sigma,
        "inputs": len(indices),
        "samples_per_input": samples,
        "noise": "certify.py estimation stream, seed 0",
        "settings": {
            name: {
                "samples_with_another_class": sum(per_input[name]),
                "share": sum(per_input[name]) / total,
                "inputs_with_any_difference": sum(count > 0 for count in per_input[name]),
            }
            for name in settings
        },
        "idx": [int(i) for i in indices],
        "per_input": per_input,
    }


def run_agreement(reference: str, other: str) -> dict:
    a, b = load_run(reference), load_run(other)
    shared, ia, ib = np.intersect1d(a.rows["idx"], b.rows["idx"], return_indices=True)
    if shared.size == 0:
        raise SystemExit(f"error: {other} shares no input idx with {reference}")
    ra = {k: v[ia] for k, v in a.rows.items()}
    rb = {k: v[ib] for k, v in b.rows.items()}
    radius_change = np.abs(ra["radius"] - rb["radius"])
    return {
        "reference": reference,
        "other": other,
        "settings": {run: load_run(run).settings.precision or "32" for run in (reference, other)},
        "inputs": int(shared.size),
        "class_or_abstention_changed": int((ra["predict"] != rb["predict"]).sum()),
        "correct_changed": int((ra["correct"] != rb["correct"]).sum()),
        "radius_changed": int((radius_change > 0).sum()),
        "max_radius_change": float(radius_change.max()),
        "count_changed": int((ra["nA"] != rb["nA"]).sum()) if "nA" in ra else None,
        "max_count_change": int(np.abs(ra["nA"] - rb["nA"]).max()) if "nA" in ra else None,
        "acr": {reference: a.acr, other: b.acr},
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    samples = sub.add_parser("samples")
    samples.add_argument("checkpoint")
    samples.add_argument("--inputs", type=int, default=100)
    samples.add_argument("--samples", type=int, default=1000)
    samples.add_argument("--skip", type=int, default=None)
    samples.add_argument("--batch-size", type=int, default=1000)
    samples.add_argument("--settings", nargs="+", default=["bf16", "bf16+cl"], choices=list(SETTINGS))
    samples.add_argument("--out", default=None, help="write the JSON to this file instead of stdout")
    runs = sub.add_parser("runs")
    runs.add_argument("reference")
    runs.add_argument("other")
    args = parser.parse_args(argv)
    if args.command == "samples":
        out = sample_agreement(
            args.checkpoint, args.inputs, args.samples, args.skip, args.settings, args.batch_size
        )
    else:
        out = run_agreement(args.reference, args.other)
    text = json.dumps(out, indent=2) + "\n"
    if getattr(args, "out", None):
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return out


if __name__ == "__main__":
    main()
