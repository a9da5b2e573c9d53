"""The comparison report, ``report RUN_DIR... [--out DIR]``: ``report.md`` (protocol block, Table-2-style
table with ACR CIs and band widths, resolved verdicts on the p_A curves and certified accuracy, the ACR order
against them, ACR at other budgets, the point-estimate dominance as an appendix), ``table.csv``,
``verdicts.csv``, ``dominance.csv``, ``budget.csv``, ``pa_ecdf_sigma<σ>.png`` and
``certified_accuracy_sigma<σ>.png`` per σ (bands shaded) and ``budget_acr.png`` (Sun et al. 2025, *Average
Certified Radius is a Poor Metric for Randomized Smoothing*, Table 2 and Appendix B)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from rs_lightning.analysis.budget import EXTRAPOLATION_WARNING, constant_classifier_budget
from rs_lightning.analysis.compare import comparison_table, default_radii, dominance, dominance_matrix
from rs_lightning.analysis.metrics import draws_over_floor
from rs_lightning.analysis.plots import certified_accuracy_figure, pa_ecdf_figure, save_figure
from rs_lightning.analysis.protocol import (
    NOISE_KEY,
    check_protocol,
    incomparable,
    partly_unverified,
    sigma_groups,
    unverified_keys,
)
from rs_lightning.analysis.run_view import Run
from rs_lightning.analysis.uncertainty import DEFAULT_BETA, RESAMPLES, check_beta
from rs_lightning.analysis.verdicts import compare_entries, describe, run_uncertainty
from rs_lightning.smoothing.certificate import NORMS
from rs_lightning.validation import require_at_least, require_non_negative, require_positive

from ..common import user_errors_exit
from .budget import add_run_arguments, budget_plot, budgets_for, run_budget_rows
from .loading import load, log_to_wandb, md_table, prepare_out, write_csv

DOMINANCE_COLUMNS = ("sigma", "a", "b", "relation", "crossings", "acr_a", "acr_b", "acr_disagrees")


def _sampling(run: Run, runs: list[Run]) -> str | None:
    """``cohen``, or the sampler's description with the mean estimation draws (``sampling=iss(ad 0.05,
    k0=1000); mean n …``) and, for a sampler with an oracle floor, mean draws ÷ mean floor at the rows' own
    p̂ and, where ``runs`` hold a fixed-n run of the same inputs and noise, at its p̂
    (:meth:`Run.oracle_floor`)."""
    protocol = run.protocol()
    if protocol["sampling"] is None or run.settings.mode == "predict":
        return protocol["sampling"]
    spec = run.settings.spec
    if spec.sampler.fixed_n:
        return spec.sampling
    text = f"{spec.sampler.describe(spec).removeprefix('sampling=')}; mean n {run.mean_n:.0f}"
    ratio = draws_over_floor(run.rows["n"], run.oracle_floor())
    if ratio is not None:  # how far from the physical limit (docs/certification.md, "The oracle floor")
        text += f"; draws / oracle floor {ratio:.2f}"
        reference = next((r for r in runs if r is not run and r.paired_with(run) is None), None)
        if reference is not None:
            paired = draws_over_floor(run.rows["n"], run.oracle_floor(at=reference))
            text += f" (at {reference.label}'s p̂: {paired:.2f})"
    return text


def _norm(run: Run) -> str:
    """``l2``, ``linf (d=3136)``, ``linf (d=…, from l2)`` for radii converted by ``--norm``; the noise
    first when it is not Gaussian (``uniform l1``)."""
    noise = "" if run.noise == "gaussian" else f"{run.noise} "
    source = run.converted_from
    if not run.certificate.needs_dim and not source:
        return noise + run.norm
    return noise + f"{run.norm} (d={run.dim}" + (f", from {source})" if source else ")")


def _protocol_cells(run) -> list:
    """σ, n, n0, α, seed, split and precision of one run, as the settings table shows them."""
    numbers = [None if v is None else f"{v:g}" for v in (run.sigma, run.n, run.n0, run.alpha)]
    return numbers + [run.protocol()[k] for k in ("seed", "split", "precision")]


def _protocol_section(
    runs: list[Run], differences: dict, notes: list[str], compare_noises: bool = False
) -> list[str]:
    out = []
    if mismatch := incomparable(differences, compare_noises):
        out += [
            "> **⚠ PROTOCOL MISMATCH (--allow-mismatch): these runs were certified under different protocols "
            f"({', '.join(mismatch)}); their numbers are not comparable. See the `protocol` column.**",
            "",
        ]
    if compare_noises and NOISE_KEY in differences:
        out += [
            "> These runs differ in their smoothing noise on purpose (`--compare-noises`); the rest of the "
            "protocol is the same and every radius is in one ball, so certified accuracy and ACR compare the "
            "certificates (Yang et al., ICML 2020). Their p_A are probabilities under different noises: the "
            "p_A curves and their verdicts say how often each smoothed classifier votes for the true label, "
            "not what it certifies.",
            "",
        ]
    columns = ["run", "σ", "n", "n0", "α", "seed", "split", "precision", "sampling", "norm", "inputs"]
    columns.append("folder")
    rows = [
        [r.label, *_protocol_cells(r), _sampling(r, runs), _norm(r), r.num_inputs, str(r.path)] for r in runs
    ]
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
    for key, labels in partly_unverified(runs).items():
        out.append(
            f"- {key} is not recorded by {', '.join(labels)} (certified before it was): not verified there."
        )
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
        f"over the radii {', '.join(f'{r:g}' for r in radii)}. The p_A verdicts of this report hold together "
        f"with probability ≥ {1 - beta:g}, and so do its certified-accuracy verdicts (both families at once: "
        f"≥ {1 - 2 * beta:g}); each difference CI below is at the same level, on its own "
        "(rs_lightning.analysis.uncertainty, .verdicts).",
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


def render_report(
    runs, differences, table, pairs, budget_rows, budgets, notes, verdicts, beta, radii, compare_noises=False
) -> str:
    """The text of ``report.md``."""
    headers = [k for k in table[0] if k not in ("path", "method", "sigma", "n", "n0", "alpha", "inputs")]
    out = ["# Certification report", "", *_protocol_section(runs, differences, notes, compare_noises)]
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
    compare_noises: bool = False,
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
    family of verdicts together (:mod:`rs_lightning.analysis.verdicts`). ``allow_mismatch`` reports runs
    certified under different protocols (marked); ``compare_noises`` only runs that differ in their noise."""
    beta = check_beta(beta)
    runs = [run.in_norm(norm, dim) for run in load(paths, sigma)]
    differences = check_protocol(runs, allow_mismatch, compare_noises)
    folder = prepare_out(out, overwrite)
    radii = list(radii) if radii else default_radii(runs)
    reference = runs[0] if incomparable(differences, compare_noises) else None
    table = comparison_table(runs, radii, reference=reference)
    uncertainty = {run.label: run_uncertainty(run, radii, beta) for run in runs}
    for row in table:
        u = uncertainty[row["label"]]
        row["acr_lo"], row["acr_hi"] = u["acr_ci"]
        row["pa_band"] = None if u["pa_band"] is None else u["pa_band"].max_half_width
        row["ca_band"] = u["ca_simultaneous"].max_half_width
    verdicts = compare_entries(runs, radii, beta, resamples)
    pairs = dominance(runs)
    notes = [note for r in runs for note in (r.limitations(), r.flagged_note()) if note]
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
    text = render_report(
        runs, differences, table, pairs, budget_rows, chosen, notes, verdicts, beta, radii, compare_noises
    )
    (folder / "report.md").write_text(text)
    if use_wandb:
        log_to_wandb(folder, table, figures)
    print(text + f"report: {folder}")
    return dict(
        out=folder,
        runs=runs,
        table=table,
        dominance=pairs,
        budget=budget_rows,
        verdicts=verdicts,
        uncertainty=uncertainty,
    )


_ACR_DIFFERENCE = ("acr_difference", "acr_difference_lo", "acr_difference_hi")
VERDICT_COLUMNS = ("sigma", "a", "b", "level", "covers", "pa_verdict", "ca_verdict", *_ACR_DIFFERENCE)


def _verdict_row(p: dict, radii) -> dict:
    row = {key: p[key] for key in ("sigma", "a", "b", "level", "covers")} | {
        "pa_verdict": None if p["pa"] is None else p["pa"]["verdict"],
        "ca_verdict": p["certified_accuracy"]["verdict"],
        "acr_difference": p["acr_a"] - p["acr_b"],
        "acr_difference_lo": p["acr_difference_ci"][0],
        "acr_difference_hi": p["acr_difference_ci"][1],
    }
    for r, (low, high) in zip(radii, p["ca_difference_ci"], strict=True):
        row[f"ca_diff@{r:g}_lo"], row[f"ca_diff@{r:g}_hi"] = low, high
    return row


@user_errors_exit
def compare_command(argv: Sequence[str]) -> int:
    """``report RUN_DIR... [--out DIR] [--radii R ...] [--budgets N ...] [--norm NORM] [--beta B] ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m rs_lightning.cli.report",
        description="Compare certification runs (report.md, table.csv, dominance.csv, plots). "
        "Subcommand: budget RUN_DIR... [--budgets N ...].",
    )
    add_run_arguments(parser)
    parser.add_argument("--radii", nargs="+", type=float, help="radii of the certified-accuracy columns")
    parser.add_argument("--allow-mismatch", action="store_true", help="report runs with different protocols")
    parser.add_argument(
        "--compare-noises",
        action="store_true",
        help="compare runs smoothed with different noises (the rest of the protocol, norm included, equal)",
    )
    parser.add_argument("--wandb", action="store_true", help="also log the table and plots to W&B (offline)")
    parser.add_argument(
        "--norm",
        choices=NORMS,
        help="state every run's radii in this ball (default: as certified; l2 -> linf: / sqrt(d))",
    )
    parser.add_argument("--dim", type=int, help="input dimension C*H*W for runs that record none")
    parser.add_argument(
        "--beta",
        default=DEFAULT_BETA,
        help=f"error probability of the bands and of all verdicts together (default {DEFAULT_BETA})",
    )
    args = parser.parse_args(argv)
    if args.sigma is not None:
        require_positive("--sigma", args.sigma)
    for radius in args.radii or []:
        require_non_negative("--radii", radius)
    if args.dim is not None:
        require_at_least("--dim", args.dim, 1)
    report(
        args.runs,
        radii=args.radii,
        allow_mismatch=args.allow_mismatch,
        compare_noises=args.compare_noises,
        use_wandb=args.wandb,
        norm=args.norm,
        dim=args.dim,
        beta=check_beta(args.beta),
        out=args.out,
        budgets=args.budgets,
        overwrite=args.overwrite,
        sigma=args.sigma,
    )
    return 0
