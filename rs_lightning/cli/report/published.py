"""``report published RUN_DIR --dataset D --method M --sigma S``: one run against the published numbers of
that cell (``published.md``, ``published.csv``; :mod:`rs_lightning.analysis.published_numbers`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from rs_lightning.analysis.protocol import ProtocolMismatchError
from rs_lightning.analysis.published_numbers import (
    PublishedCell,
    comparison_rows,
    dataset_of,
    protocol_differences,
    published_protocol,
)
from rs_lightning.analysis.published_numbers import cell as published_cell
from rs_lightning.analysis.run_view import Run
from rs_lightning.runs import ResultFileError
from rs_lightning.smoothing.certificate import Certificate

from ..common import user_errors_exit
from .loading import load, md_table, prepare_out, write_csv


def _published_value(row: dict, key: str) -> str:
    """One cell of the published-comparison table: accuracies in percent, differences in points."""
    value = row[key]
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "–"
    if key == "z":
        return f"{value:+.1f}" if np.isfinite(value) else ("+∞" if value > 0 else "−∞")
    if row["metric"] == "ACR":
        digits = {"published": 3}.get(key, 4)
        return f"{value:+.{digits}f}" if key == "difference" else f"{value:.{digits}f}"
    digits = {"published": 1}.get(key, 2)
    return f"{100 * value:+.{digits}f}" if key == "difference" else f"{100 * value:.{digits}f}"


def render_published(
    cell: PublishedCell, run: Run, rows: list[dict], differences: dict, recognized: str
) -> str:
    """The text of ``published.md``: provenance, protocol, the comparison table."""
    p, protocol = cell.protocol, run.protocol()
    title = f"{cell.dataset} σ = {cell.sigma:g}, {cell.method} (experiment {cell.experiment})"
    out = [f"# Our run against the published numbers: {title}", ""]
    out.append(
        f"- **Published**: row “{cell.row}” of {cell.source}; {p.num_images} test images "
        f"(start {p.start}, skip {p.skip}), N0 = {p.n0}, N = {p.n}, α = {p.alpha:g}."
    )
    out.append(
        f"- **Ours**: {run.path} (method in the checkpoint: {run.method or 'unknown'}; data: {recognized}); "
        f"{run.num_inputs} test images, n0 = {run.n0}, n = {run.n}, α = {run.alpha}, "
        f"precision {protocol['precision']}, sampling {protocol['sampling']}."
    )
    if differences:
        out += [
            "",
            "> **⚠ PROTOCOL DIFFERENCE (--allow-protocol-difference): our run was not certified under the "
            f"published protocol ({', '.join(differences)}); the numbers below are not directly "
            "comparable.**",
            "",
            *[f"- **{key} differs**: ours {a}, published {b}" for key, (a, b) in differences.items()],
        ]
    else:
        keys = ", ".join(published_protocol(cell))
        out.append(f"- Protocol: the same as the published one ({keys}).")
    headers = ["metric", "r", "published", "ours", "SE (ours)", "ours − published", "difference / SE"]
    body = [
        [row["metric"], "–" if row["radius"] is None else f"{row['radius']:g}"]
        + [_published_value(row, k) for k in ("published", "ours", "se", "difference", "z")]
        for row in rows
    ]
    out += ["", md_table(headers, body), ""]
    far = [r for r in rows if abs(r["z"]) > 2]
    out.append(
        "Certified accuracies in percent (differences in percentage points), ACR in L2 units (pixel range "
        "[0,1]). SE: the binomial standard error √(p(1−p)/n) of our accuracy p over our n test images (ACR: "
        "the standard deviation of correct·radius over √n). It counts the test sample's randomness only, not "
        "the seed-to-seed spread of training; the published values are rounded to 0.1 points and 0.001 ACR. "
        f"{len(far)} of {len(rows)} values differ from the published one by more than 2 SE."
    )
    if not cell.radii:
        out.append("The reference gives only the ACR of this cell.")
    if cell.notes:
        out += ["", *[f"- Note: {note}" for note in cell.notes]]
    return "\n".join(out) + "\n"


def published_report(
    path: str,
    dataset: str,
    method: str,
    sigma: str | float,
    out: str | None = None,
    *,
    allow_protocol_difference: bool = False,
    overwrite: bool = False,
) -> dict:
    """Compare the run in ``path`` with the published cell (dataset, method, σ); writes ``published.md`` and
    ``published.csv`` into ``out``. A protocol difference (dataset, σ, n0, n, α, test images, split, mode,
    sampling, precision) raises :class:`ProtocolMismatchError` unless ``allow_protocol_difference``."""
    cell = published_cell(dataset, method, sigma)
    runs = load([path], None)
    if len(runs) != 1:
        raise ResultFileError(f"{path} holds {len(runs)} certification runs; pass the folder of one")
    run = runs[0]
    if run.certificate != Certificate():
        raise ProtocolMismatchError(
            f"{run.path} holds {run.noise} {run.norm} radii; the published cells are Gaussian L2 "
            "certificates: certify with noise=gaussian norm=l2"
        )
    name, recognized = dataset_of(run.settings.data)
    protocol = run.protocol()
    ours = {"dataset": name, "sigma": run.sigma, "n0": run.n0, "n": run.n, "alpha": run.alpha}
    ours |= {k: protocol[k] for k in ("split", "mode", "sampling", "precision")}
    ours["idx"] = run.rows["idx"].tolist()
    differences = protocol_differences(cell, ours)
    if differences and not allow_protocol_difference:
        detail = "; ".join(f"{k}: ours {a}, published {b}" for k, (a, b) in differences.items())
        raise ProtocolMismatchError(
            f"{run.path} was not certified under the published protocol of {cell.dataset} {cell.method} "
            f"sigma={cell.sigma:g} ({detail}); certify with n0={cell.protocol.n0} n={cell.protocol.n} "
            f"alpha={cell.protocol.alpha:g} skip={cell.protocol.skip} on the full test set, or pass "
            "--allow-protocol-difference to compare anyway (the difference is stated in the output)"
        )
    rows = comparison_rows(cell, run.rows["radius"], run.rows["correct"])
    folder = prepare_out(out, overwrite, suffix="-published")
    text = render_published(cell, run, rows, differences, recognized)
    (folder / "published.md").write_text(text)
    write_csv(
        folder / "published.csv", rows, ("metric", "radius", "published", "ours", "se", "difference", "z")
    )
    print(text + f"published comparison: {folder}")
    return {"out": folder, "cell": cell, "run": run, "rows": rows, "differences": differences}


@user_errors_exit
def published_command(argv: Sequence[str]) -> int:
    """``report published RUN_DIR --dataset D --method M --sigma S [--out DIR] [--overwrite]
    [--allow-protocol-difference]``."""
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report published",
        description="Compare one certification run with the published numbers of its cell (ACR and "
        "certified accuracy at the published radii, our binomial standard errors and the differences).",
    )
    parser.add_argument("run", metavar="RUN_DIR", help="the certify.py output folder of our run")
    parser.add_argument("--dataset", required=True, help="cifar10 | mnist")
    parser.add_argument("--method", required=True, help="experiment prefix: cohen, smoothadv, macer, …")
    parser.add_argument("--sigma", required=True, help="0.25 | 0.5 | 1.0")
    parser.add_argument("--out", help="output folder (default outputs/report/<date>/<time>-published)")
    parser.add_argument("--overwrite", action="store_true", help="replace the files in an existing --out")
    parser.add_argument(
        "--allow-protocol-difference",
        action="store_true",
        help="compare a run certified under another protocol (the difference is stated in the output)",
    )
    args = parser.parse_args(argv)
    published_report(
        args.run,
        args.dataset,
        args.method,
        args.sigma,
        args.out,
        allow_protocol_difference=args.allow_protocol_difference,
        overwrite=args.overwrite,
    )
    return 0
