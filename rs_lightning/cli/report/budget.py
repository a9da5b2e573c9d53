"""``report budget RUN_DIR... [--budgets N ...]``: ACR against the budget N′ per run, next to the constant
classifier's closed form (Sun et al. 2025, Theorem 1 and Appendix B); prints it, writes ``budget.csv`` and
``budget_acr.png``. The budget rows and plot are the comparison report's too."""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rs_lightning.analysis.budget import (
    EXTRAPOLATION_WARNING,
    budget_figure,
    budget_table,
    check_budget,
    constant_classifier_acr,
)
from rs_lightning.analysis.plots import save_figure
from rs_lightning.analysis.run_view import Run
from rs_lightning.runs import ResultFileError
from rs_lightning.validation import require_positive

from ..common import user_errors_exit
from .loading import load, prepare_out, write_csv

DEFAULT_BUDGETS = (100, 1_000, 10_000, 100_000)


def budgets_for(runs: list[Run], budgets: Sequence[int] | None) -> list[int]:
    """The requested budgets (default 1e2 … 1e5), plus each run's own N."""
    return sorted(set(budgets or DEFAULT_BUDGETS) | {r.n for r in runs if r.n})


def run_budget_rows(
    run: Run, budgets: Sequence[int], radii: Sequence[float] = (), rules=("plugin", "expected")
) -> list[dict]:
    """Both rules at every budget for one run, flat (``ca@r`` columns); extrapolation is the rows' flag."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rows = budget_table(  # radii scale with sigma (L2) or sigma / sqrt(d) (L-infinity)
            run.pa(),
            n=run.n,
            sigma=run.radius_scale,
            alpha=run.alpha,
            budgets=budgets,
            radii=radii,
            rules=rules,
        )
    c, share = run.constant_reference()
    return [
        {"run": run.label, "sigma": run.sigma, "alpha": run.alpha}
        | {k: v for k, v in row.items() if k != "certified_accuracy"}
        | {f"ca@{r:g}": v for r, v in row["certified_accuracy"].items()}
        | {
            "constant_class": c,
            "constant_share": share,
            "constant_acr": float(constant_classifier_acr(share, run.radius_scale, run.alpha, row["budget"])),
        }
        for row in rows
    ]


def budget_plot(runs: list[Run], budgets: list[int], path: Path) -> Path:
    """ACR(N′) by the plug-in rule per run (log-spaced N′), the constant classifier's closed form dashed."""
    grid = np.unique(np.geomspace(min(budgets), max(budgets), 25).round().astype(int))
    dense = sorted(set(grid.tolist()) | set(budgets))
    curves, references = {}, {}
    for run in runs:
        rows = run_budget_rows(run, dense, rules=("plugin",))
        curves[run.label] = (dense, [r["acr"] for r in rows])
        c, share = run.constant_reference()
        key = f"constant c={c} (π={share:.3f}), σ={run.sigma:g}, α={run.alpha:g}"
        references[key] = (dense, [r["constant_acr"] for r in rows])
    return save_figure(budget_figure(curves, references, {r.label: r.n for r in runs}), path)


def budget_view(
    paths: Sequence[str],
    out: str | None = None,
    *,
    budgets: Sequence[int] | None = None,
    overwrite: bool = False,
    sigma: float | None = None,
) -> dict:
    """``report budget``: ACR against N′ per run (plug-in and expectation rules) next to the constant
    classifier's closed form for the run's σ, α and class shares; prints it, writes budget.csv and
    budget_acr.png."""
    runs = load(paths, sigma)
    supported = [r for r in runs if not r.budget_gaps()]
    notes = [
        f"{r.label}: no budget conversion (no {', '.join(r.budget_gaps())})" for r in runs if r.budget_gaps()
    ]
    if not supported:
        raise ResultFileError("no budget conversion possible: " + "; ".join(notes))
    folder = prepare_out(out, overwrite, suffix="-budget")
    chosen = budgets_for(supported, budgets)
    rows, lines = [], []
    for run in supported:
        c, share = run.constant_reference()
        lines.append(
            f"{run.label}: N={run.n}, alpha={run.alpha:g}, {run.num_inputs} inputs, own ACR {run.acr:.6f}"
        )
        lines.append(
            f"  {'N′':>10}  {'plug-in ACR':>12}  {'expected ACR':>12}  constant c={c} (π={share:.4f})"
        )
        run_rows = run_budget_rows(run, chosen)
        for plug, expect in zip(run_rows[::2], run_rows[1::2], strict=True):
            mark = " (= N)" if plug["budget"] == run.n else " †" * plug["extrapolated"]
            lines.append(
                f"  {plug['budget']:>10}  {plug['acr']:>12.6f}  {expect['acr']:>12.6f}  "
                f"{plug['constant_acr']:.6f}{mark}"
            )
        rows += run_rows
    if any(r["extrapolated"] for r in rows):
        lines.append(f"† N′ > the run's N: {EXTRAPOLATION_WARNING}")
    write_csv(folder / "budget.csv", rows)
    budget_plot(supported, chosen, folder / "budget_acr.png")
    text = "\n".join(lines + notes)
    print(text + f"\nbudget view: {folder}")
    return {"out": folder, "runs": supported, "rows": rows, "text": text}


def _budget_arg(value: str) -> int:
    try:
        return check_budget(float(value))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from err


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """RUN_DIR..., ``--out``, ``--overwrite``, ``--budgets``, ``--sigma``: the arguments of ``report budget``,
    which the comparison report takes first."""
    parser.add_argument(
        "runs", nargs="+", metavar="RUN_DIR", help="run folders, multirun folders or TSV files"
    )
    parser.add_argument("--out", help="output folder (default outputs/report/<date>/<time>)")
    parser.add_argument(
        "--overwrite", action="store_true", help="replace the report files in an existing --out"
    )
    parser.add_argument(
        "--budgets", nargs="+", type=_budget_arg, metavar="N", help="budgets N′ (default 1e2…1e5)"
    )
    parser.add_argument("--sigma", type=float, help="σ for runs that record none (old Cohen TSVs)")


@user_errors_exit
def budget_command(argv: Sequence[str]) -> int:
    """``report budget RUN_DIR... [--out DIR] [--overwrite] [--budgets N ...] [--sigma S]``."""
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report budget",
        description="ACR against the budget N′ per run, next to the constant classifier's closed form.",
    )
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.sigma is not None:
        require_positive("--sigma", args.sigma)
    budget_view(args.runs, args.out, budgets=args.budgets, overwrite=args.overwrite, sigma=args.sigma)
    return 0
