"""A finished run's ``summary.json``, plots and printed table, from its table and ``settings.json``; and
``report merge``, which finishes a run whose parts (``shard=i/k``) were certified apart."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rs_lightning.analysis.metrics import flagged_total, summarize, summarize_predictions, true_label_pa
from rs_lightning.analysis.plots import certified_accuracy_figure, pa_ecdf_figure, save_figure
from rs_lightning.runs import (
    FolderLock,
    ResultFileError,
    RunRecord,
    RunSummary,
    in_subset,
    merge_parts,
    result_table,
)


def format_summary(record: RunSummary) -> str:
    """A plain-text table of one run's summary (CERTIFY or PREDICT)."""
    summary, spec = record.metrics, record.settings.spec
    head = f"{spec.mode}: {summary['num_inputs']} inputs  {spec.describe()}"
    if summary.get("flagged_draws"):
        head += f"\n  flagged draws (no class)   {summary['flagged_draws']}"
    if spec.mode == "predict":
        return "\n".join(
            [
                head,
                f"  accuracy (smoothed, abstain = wrong)  {summary['accuracy']:.4f}",
                f"  abstain rate                         {summary['abstain_rate']:.4f}",
                f"  wrong predictions                    {summary['error_rate']:.4f}",
            ]
        )
    lines = [
        head,
        f"  clean accuracy (smoothed)  {summary['clean_accuracy']:.4f}",
        f"  abstain rate               {summary['abstain_rate']:.4f}",
        f"  ACR                        {summary['acr']:.4f}",
        f"  mean pA (true label)       {summary['pa_mean']:.4f}",
    ]
    if not spec.sampler.fixed_n:
        lines.append(f"  mean estimation draws n    {summary['mean_n']:.0f} of at most {spec.n}")
    if summary.get("draws_over_floor") is not None:
        lines.append(
            f"  draws / oracle floor       {summary['draws_over_floor']:.2f} (mean floor "
            f"{summary['mean_oracle_floor']:.0f}: Wald's bound at each row's p̂, docs/certification.md)"
        )
    lines.append("  radius   certified accuracy")
    lines += [f"  {float(r):<8g} {a:.4f}" for r, a in summary["certified_accuracy"].items()]
    ecdf = dict(zip(summary["pa_ecdf"]["x"], summary["pa_ecdf"]["y"], strict=True))
    lines.append("  pA ECDF: " + "  ".join(f"y({x:g})={ecdf[x]:.3f}" for x in (0.5, 0.9, 0.99, 0.999, 1.0)))
    return "\n".join(lines)


def throughput(rows: dict) -> dict:
    """Time spent certifying the rows (their ``time`` column: device-seconds, summed over processes) and
    the rates it implies per process; with several processes the run's wall rate is about that times
    their number."""
    seconds = float(np.sum(rows["time"])) if rows["idx"].size else 0.0
    out = {"seconds": seconds, "inputs_per_s": rows["idx"].size / seconds if seconds > 0 else None}
    if "samples" in rows:
        out["samples_per_s"] = float(np.sum(rows["samples"])) / seconds if seconds > 0 else None
    return out


def finish_run(out: Path, settings: RunRecord, radius_step: float | None = None) -> RunSummary:
    """``summary.json`` and the plots of a complete run folder, from its table and ``settings.json``;
    certified accuracy on the run's own grid unless ``radius_step`` is given."""
    radius_step = settings.radius_step if radius_step is None else radius_step
    spec = settings.spec
    sigma = spec.sigma
    certifying = spec.mode == "certify"
    rows = result_table(spec.mode).read(out)
    keep = in_subset(rows["idx"], settings.subset)
    rows = {k: v[keep] for k, v in rows.items()}
    if certifying:
        radii = spec.certificate.radius_grid(sigma, spec.n, spec.alpha, radius_step, settings.dim)
        metrics = summarize(
            rows["radius"],
            rows["correct"],
            rows["predict"],
            rows["pA_hat"],
            radii=radii,
            n=rows["n"],
            samples=rows.get("samples"),
            floor=spec.sampler.oracle_floor(spec, rows["nA"], rows["n"], settings.dim),
        )
    else:
        metrics = summarize_predictions(rows["predict"], rows["correct"])
    metrics["flagged_draws"] = flagged_total(rows)
    devices = settings.devices or []
    speed = throughput(rows) | {"devices": devices, "processes": len(devices) or 1}
    summary = RunSummary(metrics, speed, settings)
    summary.write(out)
    if certifying:
        noise = "" if spec.noise == "gaussian" else f", {spec.noise}"
        label = f"sigma={sigma:g}{noise}, n={spec.n}" + (
            "" if spec.sampler.fixed_n else f" ({spec.sampler.label()})"
        )
        save_figure(
            certified_accuracy_figure({label: (rows["radius"], rows["correct"])}, norm=spec.norm),
            out / "certified_accuracy.png",
        )
        save_figure(
            pa_ecdf_figure({label: true_label_pa(rows["correct"], rows["pA_hat"])}), out / "pa_ecdf.png"
        )
    print(format_summary(summary))
    print(f"results: {out}")
    return summary


def merge_run(out: str | Path, radius_step: float | None = None) -> dict:
    """``report merge RUN_DIR``: merge a run folder's parts (``shard=i/k`` files) into its table and write
    its summary and plots; a ResultFileError names the indices still missing or certified twice."""
    out = Path(out)
    settings = RunRecord.read(out)
    if settings is None:
        raise ResultFileError(f"{out} has no settings.json: not a certify.py run folder")
    indices = settings.indices()
    with FolderLock(out, shared=False):
        missing = merge_parts(result_table(settings.mode).path(out), indices, settings.fingerprint())
    if missing:
        raise ResultFileError(
            f"{out}: {len(missing)} of {len(indices)} inputs are in no part yet (idx {missing[:10]}"
            f"{' …' if len(missing) > 10 else ''}); certify the missing parts (shard=i/k) first"
        )
    return finish_run(out, settings, radius_step).to_dict()
