"""Compare certification runs: ``python -m rs_lightning.cli.report RUN_DIR... [--out DIR]``.

Writes ``report.md`` (protocol block, Table-2-style table with ACR CIs and band widths, resolved verdicts on
the p_A curves and certified accuracy, the ACR order against them, ACR at other budgets, the point-estimate
dominance as an appendix), ``table.csv``, ``verdicts.csv``, ``dominance.csv``, ``budget.csv``,
``pa_ecdf_sigma<σ>.png`` and ``certified_accuracy_sigma<σ>.png`` per σ (bands shaded) and ``budget_acr.png``
(Sun et al. 2025, *Average Certified Radius is a Poor Metric for Randomized Smoothing*, Table 2 and
Appendix B). ``report paired REF OTHER...`` prints paired difference CIs (rs_lightning.analysis.uncertainty).
``report budget RUN_DIR...`` prints and plots ACR
against the budget N′ next to the constant classifier's closed form (Theorem 1).
``report published RUN_DIR --dataset D --method M --sigma S`` compares one run with the published numbers
of that cell (``published.md``, ``published.csv``; rs_lightning.analysis.published_numbers). Errors: one
line ``error: ...`` and exit status 2.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import os
import sys
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
    constant_classifier_budget,
)
from rs_lightning.analysis.compare import (
    ProtocolMismatchError,
    Run,
    assign_labels,
    check_protocol,
    comparison_table,
    default_radii,
    dominance,
    dominance_matrix,
    load_runs,
    sigma_groups,
    unverified_keys,
)
from rs_lightning.analysis.plots import certified_accuracy_figure, pa_ecdf_figure, save_figure
from rs_lightning.analysis.published_numbers import (
    PublishedCell,
    UnknownCellError,
    comparison_rows,
    dataset_of,
    protocol_differences,
    published_protocol,
)
from rs_lightning.analysis.published_numbers import cell as published_cell
from rs_lightning.analysis.results import ResultFileError
from rs_lightning.analysis.uncertainty import (
    DEFAULT_BETA,
    RESAMPLES,
    check_beta,
    paired_acr_ci,
    paired_certified_accuracy,
)
from rs_lightning.analysis.verdicts import compare_entries, describe, radius_counts, run_uncertainty
from rs_lightning.smoothing.certificate import NORMS, Certificate
from rs_lightning.validation import ConfigError, require_at_least, require_non_negative, require_positive

from .common import require_writable_dir

DEFAULT_BUDGETS = (100, 1_000, 10_000, 100_000)
OUTPUTS = ("report.md", "table.csv", "dominance.csv", "budget.csv", "budget_acr.png", "pa_ecdf_sigma*.png")
DOMINANCE_COLUMNS = ("sigma", "a", "b", "relation", "crossings", "acr_a", "acr_b", "acr_disagrees")


def _checkpoint_method(path: str) -> str | None:
    """The training method recorded in a checkpoint file (read with weights_only=True); None if the file is
    gone or has none."""
    if not Path(path).is_file():
        return None
    from rs_lightning.models.checkpoint import CheckpointError, read_checkpoint

    try:
        return read_checkpoint(path)[1].training_method
    except (CheckpointError, KeyError, TypeError):
        return None


def method_name(run: Run) -> str | None:
    """The training method's class name: recorded in ``settings.json`` by certify.py, else from the run's
    checkpoint metadata (read with weights_only=True);
    "<format> (published)" for a published checkpoint (``checkpoint_format=``); the model's class for a
    checkpoint-free run (e.g. ConstantClassifier); None if unknown."""
    settings = run.settings
    checkpoint, model = settings.checkpoint, settings.model
    if settings.checkpoint_format:  # a published checkpoint: labelled by its repository's layout
        return f"{settings.checkpoint_format} (published)"
    if checkpoint is None:
        target = model.get("_target_") if isinstance(model, dict) else None
        return target.rsplit(".", 1)[-1] if target else None
    name = settings.method or _checkpoint_method(checkpoint)  # settings: an archived folder
    if name is None:
        return None
    pipeline = settings.pipeline
    return f"{name} ({pipeline.get('mode')})" if isinstance(pipeline, dict) else name


def load(paths: Sequence[str], sigma: float | None) -> list[Run]:
    """Runs under ``paths``, labelled "<method> σ=<sigma>"."""
    runs = load_runs(paths, sigma)
    for run in runs:
        run.method = method_name(run)
    assign_labels(runs)
    return runs


def prepare_out(out: str | None, overwrite: bool, suffix: str = "") -> Path:
    """The output folder: new or empty, or (``overwrite``) with the previous report's files removed; a
    ConfigError naming ``--out`` if it cannot be written."""
    path = Path(out or f"outputs/report/{dt.datetime.now():%Y-%m-%d/%H-%M-%S}{suffix}")
    try:
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            if not overwrite or not path.is_dir():
                raise ResultFileError(
                    f"{path} already exists and is not empty; choose another --out or pass --overwrite"
                )
            for pattern in OUTPUTS:
                for old in path.glob(pattern):
                    old.unlink()
    except OSError as err:
        hint = (
            f"{path} cannot be read or cleared ({err.strerror or type(err).__name__}); choose another --out"
        )
        raise ConfigError("--out", str(path), "a folder you can write to", hint) from err
    return require_writable_dir(path, "--out")


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "nan" if np.isnan(value) else f"{value:.4f}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows])


def write_csv(path: Path, rows: list[dict], columns: Sequence[str] = ()) -> None:
    """Rows as CSV (None → empty); ``columns`` gives the header when there are no rows."""
    columns = list(dict.fromkeys([*columns, *(k for row in rows for k in row)]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)


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
            run.pa(), n=run.n, sigma=run.radius_scale, alpha=run.alpha, budgets=budgets, radii=radii,
            rules=rules,
        )  # fmt: skip
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


def _sampling(run: Run) -> str | None:
    """``cohen``, ``iss ad 0.05 (k0=1000; mean n …)`` or ``sequential (… radii up to …; mean n …)``."""
    protocol = run.protocol()
    seq = protocol.get("sequential")
    if protocol["sampling"] == "sequential" and isinstance(seq, dict) and seq.get("radii"):
        return f"sequential ({len(seq['radii'])} radii up to {seq['radii'][-1]:g}; mean n {run.mean_n:.0f})"
    if protocol["sampling"] != "iss" or not isinstance(protocol["iss"], dict):
        return protocol["sampling"]
    iss = protocol["iss"]
    reuse = ", reuse_pilot" if iss.get("reuse_pilot") else ""
    decline = f"{iss.get('decline')} {iss.get('max_decline'):g}"
    return f"iss {decline} (k0={iss.get('k0')}{reuse}; mean n {run.mean_n:.0f})"


def _norm(run: Run) -> str:
    """``l2``, ``linf (d=3136)``, ``linf (d=…, from l2)`` for radii converted by ``--norm``; the noise
    first when it is not Gaussian (``uniform l1``)."""
    noise = "" if run.noise == "gaussian" else f"{run.noise} "
    source = run.converted_from
    if not run.certificate.needs_dim and not source:
        return noise + run.norm
    return noise + f"{run.norm} (d={run.dim}" + (f", from {source})" if source else ")")


def _protocol_section(runs: list[Run], differences: dict, notes: list[str]) -> list[str]:
    out = []
    if differences:
        out += [
            "> **⚠ PROTOCOL MISMATCH (--allow-mismatch): these runs were certified under different protocols "
            f"({', '.join(differences)}); their numbers are not comparable. See the `protocol` column.**",
            "",
        ]
    columns = ["run", "σ", "n", "n0", "α", "seed", "split", "precision", "sampling", "norm", "inputs"]
    columns.append("folder")
    rows = [
        [r.label, *[None if v is None else f"{v:g}" for v in (r.sigma, r.n, r.n0, r.alpha)],
         *[r.protocol()[k] for k in ("seed", "split", "precision")], _sampling(r), _norm(r), r.num_inputs,
         str(r.path)]
        for r in runs
    ]  # fmt: skip
    out += ["## Settings and protocol", "", md_table(columns, rows), ""]
    if differences:
        out += [
            f"- **{k} differs**: " + "; ".join(f"{a}: {v}" for a, v in d.items())
            for k, d in differences.items()
        ]
    else:
        out.append(
            "- All runs share the inputs (idx set), n, n0, α, seed, split, precision, sampling and norm."
        )
    if unknown := unverified_keys(runs):
        out.append(f"- Not recorded by any run, so not verified: {', '.join(unknown)}.")
    return out + [f"- {note}" for note in notes]


def _verdict_cell(result: dict | None, flipped: bool) -> str:
    if result is None:
        return "–"
    kind = result["verdict"]
    if flipped:
        kind = {"A>=B": "B>=A", "B>=A": "A>=B"}.get(kind, kind)
    return {"A>=B": "≥", "B>=A": "≤", "cross": "×", "unresolved": "?"}[kind]


def _verdict_matrix(group: list[str], pairs: list[dict], key: str) -> str:
    by_pair = {(p["a"], p["b"]): (p, False) for p in pairs} | {(p["b"], p["a"]): (p, True) for p in pairs}
    rows = []
    for a in group:
        cells = []
        for b in group:
            pair, flipped = by_pair.get((a, b), (None, False))
            cells.append("—" if a == b or pair is None else _verdict_cell(pair[key], flipped))
        rows.append([a, *cells])
    return md_table(["", *group], rows)


def _verdict_section(runs: list[Run], pairs: list[dict], beta: float, radii) -> list[str]:
    family = len(pairs)
    skipped = [p for p in pairs if p.get("skipped")]
    pairs = [p for p in pairs if not p.get("skipped")]
    out = [
        f"## Resolved verdicts (β = {beta:g}, Bonferroni over the {family} comparisons of this report)",
        "",
        "`≥`: the row is resolved above the column somewhere and the column nowhere above the row; `≤`: the "
        "reverse; `×`: each is resolved above the other somewhere (they cross); `?`: unresolved. The p_A "
        "curves are compared over pA ∈ [0.5, 1] (Monte-Carlo error of every p̂A included), certified accuracy "
        f"over the radii {', '.join(f'{r:g}' for r in radii)}; all verdicts of this report hold together "
        f"with probability ≥ {1 - beta:g} (rs_lightning.analysis.uncertainty, .verdicts).",
    ]
    for sigma in dict.fromkeys(p["sigma"] for p in pairs):
        group = list(dict.fromkeys(x for p in pairs if p["sigma"] == sigma for x in (p["a"], p["b"])))
        mine = [p for p in pairs if p["sigma"] == sigma]
        label = "?" if sigma is None else f"{sigma:g}"
        out += ["", f"### σ = {label}: p_A curves", "", _verdict_matrix(group, mine, "pa")]
        out += ["", f"### σ = {label}: certified accuracy over the radius grid", ""]
        out.append(_verdict_matrix(group, mine, "certified_accuracy"))
    for p in skipped:
        out += ["", f"Not compared: {p['a']} and {p['b']} ({p['skipped']})."]
    one_seed = [p for p in pairs if p["seeds"] < 2]
    if one_seed:
        out += [
            "",
            f"{len(one_seed)} of the {family} comparisons have one training seed on a side: their verdicts "
            "cover the resampling of test inputs only, not the spread between training runs of one recipe.",
        ]
    out += ["", "## ACR order against the resolved verdicts", ""]
    lines = []
    for p in pairs:
        low, high = p["acr_difference_ci"]
        ci = f"ACR(A) − ACR(B) = {p['acr_a'] - p['acr_b']:+.4f}, CI [{low:+.4f}, {high:+.4f}]"
        verdict = (p["pa"] or {}).get("verdict")
        if verdict in ("A>=B", "B>=A"):
            better, worse = (p["a"], p["b"]) if verdict == "A>=B" else (p["b"], p["a"])
            against = (high < 0) if verdict == "A>=B" else (low > 0)
            ranks = (p["acr_a"] < p["acr_b"]) if verdict == "A>=B" else (p["acr_a"] > p["acr_b"])
            if against:
                lines.append(f"- **{better} ≥ {worse} on p_A, but ACR is resolved the other way** ({ci}).")
            elif ranks:
                lines.append(
                    f"- {better} ≥ {worse} on p_A, while ACR ranks {worse} first (unresolved; {ci})."
                )
        elif verdict == "cross":
            where_a, where_b = p["pa"]["a_above_at"], p["pa"]["b_above_at"]
            span_a, span_b = f"[{min(where_a):g}, {max(where_a):g}]", f"[{min(where_b):g}, {max(where_b):g}]"
            lines.append(
                f"- {p['a']} and {p['b']} cross: A above at pA ∈ {span_a}, B above at pA ∈ {span_b}; one ACR "
                f"cannot rank them ({ci})."
            )
    out += lines or ["No resolved p_A verdict contradicts the ACR order, and no resolved crossing."]
    out += ["", "Pairs (A, B): paired differences A − B with their CIs (same level):", ""]
    rows = []
    for p in pairs:
        low, high = p["acr_difference_ci"]
        delta = f"{p['acr_a'] - p['acr_b']:+.4f} [{low:+.4f}, {high:+.4f}]"
        verdicts = describe(p["pa"], "p_A"), describe(p["certified_accuracy"], "cert. acc.")
        rows.append([p["a"], p["b"], *verdicts, delta, p["covers"]])
    return out + [md_table(["A", "B", "p_A curves", "certified accuracy", "ΔACR [CI]", "covers"], rows)]


def _point_estimate_appendix(runs: list[Run], pairs: list[dict]) -> list[str]:
    out = [
        "## Appendix: point estimates of the p_A curves (not verdicts)",
        "",
        "Computed from the p̂A of these inputs alone, without their uncertainty: `≥` the row's curve is ≥ the "
        "column's at every pA ≥ 0.5, `× x` they cross at pA = x. Use the resolved verdicts above.",
    ]
    for sigma, group in sigma_groups(runs).items():
        group = [r for r in group if r.has_counts]
        if len(group) < 2:
            continue
        out += ["", f"### σ = {'?' if sigma is None else f'{sigma:g}'}", ""]
        cells = dominance_matrix(group, pairs)
        out.append(
            md_table(
                ["", *[r.label for r in group]], [[r.label, *c] for r, c in zip(group, cells, strict=True)]
            )
        )
    return out


def _budget_section(runs: list[Run], budget_rows: list[dict], budgets: list[int]) -> list[str]:
    out = ["## ACR at other budgets N′ (Sun et al. 2025, Appendix B)", ""]
    if not budget_rows:
        gaps = sorted({gap for run in runs for gap in run.budget_gaps()})
        return out + [f"No budget conversion: no run has all it needs (missing: {'; '.join(gaps)})."]
    cells: dict[tuple[str, str], dict[int, str]] = {}
    for row in budget_rows:
        cells.setdefault((row["run"], row["rule"]), {})[row["budget"]] = (
            f"{row['acr']:.4f}" + "†" * row["extrapolated"]
        )
    for row in budget_rows:
        c, share, sigma, alpha = (row[k] for k in ("constant_class", "constant_share", "sigma", "alpha"))
        key = (f"constant c={c} (π={share:.3f}, σ={sigma:g}, α={alpha:g})", "closed form")
        cells.setdefault(key, {})[row["budget"]] = f"{row['constant_acr']:.4f}"
    body = [[run, rule, *[by.get(b, "") for b in budgets]] for (run, rule), by in cells.items()]
    out += [md_table(["run", "rule", *[f"N′={b:g}" for b in budgets]], body), ""]
    out.append(
        "`plugin`: R(round(p̂·N′)); `expected`: E over n_A ~ Bin(N′, p̂). "
        f"† N′ > the run's N: {EXTRAPOLATION_WARNING}. Constant: π_c·σ·Φ⁻¹(α^(1/N′)) (Theorem 1), c = the "
        "run's majority class (or its own label for a ConstantClassifier run)."
    )
    best = max((r for r in runs if not r.budget_gaps()), key=lambda r: r.acr)
    c, share = best.constant_reference()
    if share > 0:
        need = constant_classifier_budget(best.acr, share, best.radius_scale, best.alpha)
        out.append(
            f"\nThe constant classifier h ≡ {c} reaches the best ACR here ({best.label}: {best.acr:.4f}) "
            f"at N ≈ {need:.2g}."
        )
    return out + ["", "![ACR against N′](budget_acr.png)"]


def ecdf_png(sigma: float | None) -> str:
    return "pa_ecdf_sigma_unknown.png" if sigma is None else f"pa_ecdf_sigma{sigma:g}.png"


def render_report(runs, differences, table, pairs, budget_rows, budgets, notes, verdicts, beta, radii) -> str:
    """The text of ``report.md``."""
    headers = [k for k in table[0] if k not in ("path", "method", "sigma", "n", "n0", "alpha", "inputs")]
    out = ["# Certification report", "", *_protocol_section(runs, differences, notes)]
    out += ["", "## Certified accuracy and ACR (Table-2 style)", ""]
    out += [md_table(headers, [[row[k] for k in headers] for row in table]), ""]
    norms = sorted({r.certificate.label for r in runs})
    out.append(
        f"`ca@r`: share of inputs certified correct with {'/'.join(norms)} radius ≥ r ([0,1] pixel units); "
        "`y(x)`: share with p̂A ≥ x (true label; wrong or abstained = 0); `acr_lo`/`acr_hi`: the ACR's "
        f"{1 - beta:g} bootstrap CI over inputs; `pa_band`: the half-width of the run's simultaneous "
        f"{1 - beta:g} band of its p_A curve at its widest; `ca_band`: that of its certified-accuracy curve."
    )
    out += [
        "",
        *_verdict_section(runs, verdicts, beta, radii),
        "",
        *_budget_section(runs, budget_rows, budgets),
    ]
    pngs = [ecdf_png(s) for s, group in sigma_groups(runs).items() if any(r.has_counts for r in group)]
    if pngs:
        out += ["", "## pA ECDF (shaded: simultaneous bands)", "", *[f"![pA ECDF]({p})" for p in pngs]]
    out += ["", "## Certified accuracy (shaded: simultaneous bands)", ""]
    out += [f"![certified accuracy]({ca_png(s)})" for s in sigma_groups(runs)]
    return "\n".join([*out, "", *_point_estimate_appendix(runs, pairs)]) + "\n"


def ca_png(sigma: float | None) -> str:
    return (
        "certified_accuracy_sigma_unknown.png" if sigma is None else f"certified_accuracy_sigma{sigma:g}.png"
    )


def report(
    paths: Sequence[str],
    out: str | None = None,
    *,
    radii: Sequence[float] | None = None,
    budgets: Sequence[int] | None = None,
    allow_mismatch: bool = False,
    overwrite: bool = False,
    sigma: float | None = None,
    use_wandb: bool = False,
    norm: str | None = None,
    dim: int | None = None,
    beta: float = DEFAULT_BETA,
    resamples: int = RESAMPLES,
) -> dict:
    """Write the comparison report of the runs under ``paths`` into ``out``; returns its parts. ``norm``
    states every run's radii in that ball (None: as certified; see :meth:`Run.in_norm`, ``dim`` for runs
    that record no input dimension); ``beta`` is the error probability of every band and of the report's
    family of verdicts together (:mod:`rs_lightning.analysis.verdicts`)."""
    beta = check_beta(beta)
    runs = [run.in_norm(norm, dim) for run in load(paths, sigma)]
    differences = check_protocol(runs, allow_mismatch)
    folder = prepare_out(out, overwrite)
    radii = list(radii) if radii else default_radii(runs)
    table = comparison_table(runs, radii, reference=runs[0] if differences else None)
    uncertainty = {run.label: run_uncertainty(run, radii, beta) for run in runs}
    for row in table:
        u = uncertainty[row["label"]]
        row["acr_lo"], row["acr_hi"] = u["acr_ci"]
        row["pa_band"] = None if u["pa_band"] is None else u["pa_band"].max_half_width
        row["ca_band"] = u["ca_simultaneous"].max_half_width
    verdicts = compare_entries(runs, radii, beta, resamples)
    pairs = dominance(runs)
    notes = [note for note in (r.limitations() for r in runs) if note]
    notes += [u["warning"] for u in uncertainty.values() if "warning" in u]
    notes += [
        f"{r.label}: no budget conversion (no {', '.join(r.budget_gaps())})"
        for r in runs
        if r.has_counts and r.budget_gaps()
    ]
    supported = [r for r in runs if not r.budget_gaps()]
    chosen = budgets_for(supported, budgets)
    budget_rows = [row for run in supported for row in run_budget_rows(run, chosen, radii)]
    write_csv(folder / "table.csv", table)
    crossings = [{**p, "crossings": ";".join(f"{x:.3f}" for x in p["crossings"])} for p in pairs]
    write_csv(folder / "dominance.csv", crossings, DOMINANCE_COLUMNS)
    compared = [p for p in verdicts if not p.get("skipped")]
    write_csv(folder / "verdicts.csv", [_verdict_row(p, radii) for p in compared], VERDICT_COLUMNS)
    bands = {label: u["pa_band"] for label, u in uncertainty.items() if u["pa_band"] is not None}
    figures = [
        save_figure(pa_ecdf_figure({r.label: r.pa() for r in group}, bands=bands), folder / ecdf_png(s))
        for s, group in ((s, [r for r in g if r.has_counts]) for s, g in sigma_groups(runs).items())
        if group
    ]
    for s, group in sigma_groups(runs).items():
        curves = {r.label: (r.rows["radius"], r.rows["correct"]) for r in group}
        eps = {r.label: uncertainty[r.label]["ca_simultaneous"].max_half_width for r in group}
        norm_of = group[0].norm
        figures.append(
            save_figure(certified_accuracy_figure(curves, norm=norm_of, bands=eps), folder / ca_png(s))
        )
    if supported:
        write_csv(folder / "budget.csv", budget_rows)
        figures.append(budget_plot(supported, chosen, folder / "budget_acr.png"))
    text = render_report(runs, differences, table, pairs, budget_rows, chosen, notes, verdicts, beta, radii)
    (folder / "report.md").write_text(text)
    if use_wandb:
        log_to_wandb(folder, table, figures)
    print(text + f"report: {folder}")
    return {
        "out": folder, "runs": runs, "table": table, "dominance": pairs, "budget": budget_rows,
        "verdicts": verdicts, "uncertainty": uncertainty,
    }  # fmt: skip


VERDICT_COLUMNS = ("sigma", "a", "b", "level", "covers", "pa_verdict", "ca_verdict", "acr_difference",
                   "acr_difference_lo", "acr_difference_hi")  # fmt: skip


def _verdict_row(p: dict, radii) -> dict:
    row = {
        "sigma": p["sigma"], "a": p["a"], "b": p["b"], "level": p["level"], "covers": p["covers"],
        "pa_verdict": None if p["pa"] is None else p["pa"]["verdict"],
        "ca_verdict": p["certified_accuracy"]["verdict"], "acr_difference": p["acr_a"] - p["acr_b"],
        "acr_difference_lo": p["acr_difference_ci"][0], "acr_difference_hi": p["acr_difference_ci"][1],
    }  # fmt: skip
    for r, (low, high) in zip(radii, p["ca_difference_ci"], strict=True):
        row[f"ca_diff@{r:g}_lo"], row[f"ca_diff@{r:g}_hi"] = low, high
    return row


def log_to_wandb(folder: Path, table: list[dict], figures: list[Path]) -> None:
    """Log the table (``wandb.Table``) and the figures to a W&B run, offline unless WANDB_MODE is set."""
    import wandb

    columns = list(table[0])
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "rs-lightning"),
        job_type="report",
        dir=str(folder),
        mode=os.environ.get("WANDB_MODE", "offline"),
        reinit="create_new",  # a run left open by training in this process must not swallow the report
    )
    try:
        data = [["" if row.get(c) is None else row[c] for c in columns] for row in table]
        images = {f"report/{path.stem}": wandb.Image(str(path)) for path in figures}
        run.log({"report/table": wandb.Table(columns=columns, data=data), **images})
    finally:
        run.finish()


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


def parse_args(argv: Sequence[str]) -> tuple[str, argparse.Namespace]:
    """``budget RUN_DIR...`` or ``RUN_DIR...`` (a run folder literally named ``budget``: ``./budget``)."""
    command = "budget" if list(argv[:1]) == ["budget"] else "report"
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report" + (" budget" if command == "budget" else ""),
        description="ACR against the budget N′ per run, next to the constant classifier's closed form."
        if command == "budget"
        else "Compare certification runs (report.md, table.csv, dominance.csv, plots). "
        "Subcommand: budget RUN_DIR... [--budgets N ...].",
    )
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
    if command == "report":
        parser.add_argument("--radii", nargs="+", type=float, help="radii of the certified-accuracy columns")
        parser.add_argument(
            "--allow-mismatch", action="store_true", help="report runs with different protocols"
        )
        parser.add_argument(
            "--wandb", action="store_true", help="also log the table and plots to W&B (offline)"
        )
        parser.add_argument(
            "--norm", choices=NORMS,
            help="state every run's radii in this ball (default: as certified; l2 -> linf: / sqrt(d))",
        )  # fmt: skip
        parser.add_argument("--dim", type=int, help="input dimension C*H*W for runs that record none")
        parser.add_argument(
            "--beta", default=DEFAULT_BETA,
            help=f"error probability of the bands and of all verdicts together (default {DEFAULT_BETA})",
        )  # fmt: skip
    return command, parser.parse_args(argv[1:] if command == "budget" else argv)


def merge_command(argv: Sequence[str]) -> int:
    """``report merge RUN_DIR [--radius-step R]``: one result from the parts of a sharded run."""
    from rs_lightning.cli.certify import merge_run

    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report merge",
        description="Merge the shard files (certify.py shard=i/k) of a run folder into certify.tsv, "
        "then write summary.json and the plots.",
    )
    parser.add_argument("run", metavar="RUN_DIR")
    parser.add_argument("--radius-step", type=float, help="certified-accuracy grid (default: the run's)")
    args = parser.parse_args(argv)
    try:
        if args.radius_step is not None and not args.radius_step > 0:
            raise ConfigError("--radius-step", args.radius_step, "> 0")
        merge_run(args.run, args.radius_step)
    except (ConfigError, ResultFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


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
    try:
        published_report(
            args.run,
            args.dataset,
            args.method,
            args.sigma,
            args.out,
            allow_protocol_difference=args.allow_protocol_difference,
            overwrite=args.overwrite,
        )
    except (UnknownCellError, ConfigError, ResultFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def paired_command(argv: Sequence[str]) -> int:
    """``report paired REFERENCE OTHER... [--radii R ...] [--beta B]``: paired differences REFERENCE − OTHER
    of ACR and of certified accuracy at each radius, with (1 − β) percentile bootstrap CIs over the shared
    inputs (:mod:`rs_lightning.analysis.uncertainty`; Bonferroni over the OTHERs)."""
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report paired",
        description="Paired bootstrap CIs of ACR and certified-accuracy differences between runs on the "
        "same inputs (each pair with its own generator).",
    )
    parser.add_argument("reference", metavar="REFERENCE_RUN")
    parser.add_argument("others", nargs="+", metavar="OTHER_RUN")
    parser.add_argument(
        "--radii", nargs="+", type=float, default=[], help="certified accuracy at these radii"
    )
    parser.add_argument("--beta", default=DEFAULT_BETA, help=f"1 - confidence (default {DEFAULT_BETA})")
    args = parser.parse_args(argv)
    try:
        beta = check_beta(args.beta)
        for radius in args.radii:
            require_non_negative("--radii", radius)
        reference = load_runs([args.reference])[0]
        level = beta / len(args.others)
        for path in args.others:
            other = load_runs([path])[0]
            a, b = radius_counts(reference), radius_counts(other)
            names = (str(reference.path), str(other.path))
            low, high = paired_acr_ci(a, b, level, names=names)
            diff = reference.acr - other.acr
            what = f"{reference.path} - {other.path}"
            print(
                f"ACR: {what}: {diff:+.4f}  {1 - level:.4g} CI [{low:+.4f}, {high:+.4f}]  ({a.size} inputs)"
            )
            if args.radii:
                result = paired_certified_accuracy(a, b, args.radii, level, names=names)
                band = result["pointwise"]
                for r, d, lo, hi in zip(args.radii, band.point, band.lower, band.upper, strict=True):
                    print(f"certified accuracy at r={r:g}: {what}: {d:+.4f}  CI [{lo:+.4f}, {hi:+.4f}]")
    except (ConfigError, ResultFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; a user error prints ``error: ...`` on one line and returns 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["merge"]:
        return merge_command(argv[1:])
    if argv[:1] == ["paired"]:
        return paired_command(argv[1:])
    if argv[:1] == ["published"]:
        return published_command(argv[1:])
    command, args = parse_args(argv)
    common = dict(out=args.out, budgets=args.budgets, overwrite=args.overwrite, sigma=args.sigma)
    try:
        if args.sigma is not None:
            require_positive("--sigma", args.sigma)
        for radius in getattr(args, "radii", None) or []:
            require_non_negative("--radii", radius)
        if command == "budget":
            budget_view(args.runs, **common)
        else:
            if args.dim is not None:
                require_at_least("--dim", args.dim, 1)
            report(
                args.runs,
                radii=args.radii,
                allow_mismatch=args.allow_mismatch,
                use_wandb=args.wandb,
                norm=args.norm,
                dim=args.dim,
                beta=check_beta(args.beta),
                **common,
            )
    except (ConfigError, ResultFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
