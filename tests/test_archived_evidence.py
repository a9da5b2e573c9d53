"""The archived evidence rebuilds: every report and table under docs/results/ that has its per-input rows in
the repository is built again from those rows, with the command its generator (evidence/<study>/, see
evidence/README.md) uses, and must equal the committed file byte for byte — so a change to the report code
that moves a published number, or a hand edit of a committed table, fails here. (Figures are not compared:
matplotlib's output is not stable.)"""

from __future__ import annotations

import filecmp
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from rs_testing import REPO, run_script

from rs_lightning.runs import read_results

RESULTS = REPO / "docs" / "results"
STRUCTURED = RESULTS / "mnist_structured"
SEQUENTIAL = RESULTS / "sequential"


REPORT_FILES = ["report.md", "table.csv", "dominance.csv", "verdicts.csv", "budget.csv"]


def assert_report_rebuilds(args: list[str], committed, out) -> None:
    """``python -m rs_lightning.cli.report ARGS --out OUT`` writes the committed folder's report files."""
    done = run_script("-m rs_lightning.cli.report", *args, "--out", str(out), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    match, mismatch, errors = filecmp.cmpfiles(committed, out, REPORT_FILES, shallow=False)
    assert (mismatch, errors) == ([], []), f"rebuilt differently: {mismatch + errors}"


@pytest.mark.parametrize("sigma", ["025", "050"])
def test_the_structured_mnist_reports_rebuild_from_their_rows(tmp_path, sigma):
    """evidence/mnist_structured/acr_gaming_comparison.sh's report of every archived run at one σ."""
    folder = STRUCTURED / "runs"  # as the script: every seed of every run at this σ
    runs = [
        str(p.relative_to(REPO))
        for pattern in (f"*_s{sigma}", f"*_s{sigma}_seed*")
        for p in sorted(folder.glob(pattern))
    ]
    assert len(runs) >= 6
    budgets = ["--budgets", "100", "1000", "10000", "100000", "1000000"]
    assert_report_rebuilds([*runs, *budgets], STRUCTURED / f"sigma{sigma}", tmp_path)


def test_the_structured_paired_cis_rebuild_and_are_the_docs_tables(tmp_path):
    """evidence/mnist_structured/structured_pairs.py (run by acr_gaming_comparison.sh) from the archived
    rows: both files equal the committed ones, and every CI cell of docs/results.md's MACER,
    SmoothMix/SmoothAdv and CAT-RS/ACR-gaming tables is one of their intervals. Catches a table left from the
    since-removed CI script or edited by hand."""
    done = run_script("evidence/mnist_structured/structured_pairs.py", "--out", str(tmp_path), timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    files = ["paired_sigma025.txt", "paired_sigma050.txt"]
    match, mismatch, errors = filecmp.cmpfiles(STRUCTURED, tmp_path, files, shallow=False)
    assert (mismatch, errors) == ([], []), f"rebuilt differently: {mismatch + errors}"

    intervals = {}  # (sigma, reference, other, "acr" or radius) -> (difference, low, high)
    pattern = r"(ACR|at r=([\d.]+)): \S+/(\w+)_s(\d+) - \S+/(\w+)_s\d+: (\S+) .*CI \[(\S+), (\S+)\]"
    for name in files:
        for line in (STRUCTURED / name).read_text().splitlines():
            kind, radius, reference, sigma, other, *values = re.search(pattern, line).groups()
            intervals[sigma, reference, other, radius or "acr"] = [float(v) for v in values]

    def cell(sigma, reference, other, what="acr") -> str:  # as the docs write it: 3 places, −, 0.000
        def num(x: float) -> str:
            text = f"{x:+.3f}"
            return "0.000" if text in ("+0.000", "-0.000") else text.replace("-", "−")

        d, low, high = intervals[sigma, reference, other, what]
        return f"{num(d)} [{'+0.0003' if 0 < low < 0.0005 else num(low)}, {num(high)}]"

    both = ("025", "050")
    expected = {
        "| MACER − other |": [
            [cell(s, "macer", other, what) for s in both]
            for what, other in [
                ("acr", "gaussian"),
                ("acr", "consistency"),
                ("0.5", "gaussian"),
                ("0.5", "consistency"),
            ]
        ],
        "| ACR difference (95 % CI) |": [
            *[
                [
                    cell(s, "smoothadv", o)
                    for o in ("gaussian", "macer", "consistency", "smoothmix", "catrs", "acr_gaming")
                ]
                for s in ("050", "025")
            ],
            [cell("050", "smoothmix", o) for o in ("gaussian", "macer", "consistency")],
            [cell("025", "smoothmix", o) for o in ("gaussian", "macer", "consistency")],
        ],
        "| difference (95 % CI) |": [
            [cell(s, "catrs", "gaussian") for s in both],
            [cell(s, "catrs", "consistency") for s in both],
            [cell("025", "catrs", "consistency", "0.75"), cell("050", "catrs", "consistency", "1.5")],
            [cell(s, "catrs", "acr_gaming") for s in both],
            [cell(s, "acr_gaming", "gaussian") for s in both],
            [cell(s, "acr_gaming", "consistency") for s in both],
            [cell(s, "acr_gaming", "consistency", "0.25") for s in both],
            [cell("025", "acr_gaming", "consistency", "0.5")],
            [cell("050", "acr_gaming", "consistency", "1")],
            [
                cell("025", "acr_gaming", "consistency", "0.75"),
                cell("050", "acr_gaming", "consistency", "1.5"),
            ],
        ],
    }
    text = (REPO / "docs" / "results.md").read_text()
    for head, rows in expected.items():
        start = text.index(head)
        table = text[start : text.index("\n\n", start)].splitlines()[2:]
        cells = [[c.strip() for c in row.split("|")[2:-1] if c.strip()] for row in table]
        assert cells == rows, head


PUBLISHED_RADII = {
    "025": ["0", "0.25", "0.5", "0.75"],
    "050": ["0", "0.25", "0.5", "0.75", "1", "1.25", "1.5", "1.75"],
    "100": ["0", "0.5", "1", "1.5", "2", "2.5", "3", "3.5"],
}


def reproduction_reports() -> list[str]:
    return sorted(p.parent.name for p in (RESULTS / "mnist_reproduction").glob("*/runs"))


@pytest.mark.parametrize("name", reproduction_reports())
def test_the_published_schedule_reports_rebuild_from_their_rows(tmp_path, name):
    """evidence/mnist_reproduction/mnist_reproduction.sh's report of the archived runs at one σ and budget
    (e.g. the σ = 1.0 Gaussian/Consistency pair at sigma = 1.0), and each run against its published row."""
    folder = RESULTS / "mnist_reproduction" / name
    runs = sorted(str(p.relative_to(REPO)) for p in (folder / "runs").iterdir())  # as the script's glob
    sigma, budget = name.removeprefix("sigma").split("_")  # e.g. "100", "n100000"
    radii = PUBLISHED_RADII[sigma]  # the script's radii_of: the published table's grid
    args = [*runs, "--budgets", "1000", "10000", "100000", "--radii", *radii]
    assert_report_rebuilds(args, folder, tmp_path / "report")
    # the paired Consistency - Gaussian CIs the docs quote
    paired = run_script("-m rs_lightning.cli.report paired", *runs[::-1], "--radii", *radii, timeout=600)
    assert paired.returncode == 0, paired.stderr[-2000:]
    assert paired.stdout == (folder / "paired_consistency_cohen.txt").read_text()
    for run in runs:  # the script's `report published` of each run
        method = run.rsplit("/", 1)[1]
        args = ["--dataset", "mnist", "--method", method, "--sigma", str(int(sigma) / 100)]  # 025 -> 0.25
        out = tmp_path / method
        done = run_script(
            "-m rs_lightning.cli.report published",
            run,
            *args,
            "--allow-protocol-difference",
            "--out",
            str(out),
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        committed = RESULTS / "mnist_reproduction" / "published" / f"{method}_mnist_sigma{sigma}_{budget}"
        files = ["published.md", "published.csv"]
        match = filecmp.cmpfiles(committed, out, files, shallow=False)[0]
        assert match == files, f"{committed} rebuilt differently"


def sequential_models() -> list[str]:
    return sorted(p.name for p in (SEQUENTIAL / "runs").iterdir() if (SEQUENTIAL / f"{p.name}.md").is_file())


@pytest.mark.parametrize("model", sequential_models())
def test_the_sequential_tables_rebuild_from_their_rows(tmp_path, model):
    """evidence/sequential/sequential_certification.sh's stage_tables, over the archived runs in its order."""
    order = [
        "cohen",
        "iss_ad005",
        "sequential",
        "sequential_to_1.5",
        "levers",
        "levers_to_1.5",
        "cohen_fp32",
        "sequential_bf16",
    ]
    runs = [
        SEQUENTIAL / "runs" / model / name for name in order if (SEQUENTIAL / "runs" / model / name).is_dir()
    ]
    common = [] if all((run / "summary.json").is_file() for run in runs) else ["--common-inputs"]
    args = [str(run.relative_to(REPO)) for run in runs] + common + ["--json", str(tmp_path / "t.json")]
    done = run_script("scripts/sequential_comparison.py", *args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == (SEQUENTIAL / f"{model}.md").read_text()
    assert (tmp_path / "t.json").read_text() == (SEQUENTIAL / f"{model}.json").read_text()


def test_every_archived_table_has_its_rows():
    """A table without its rows could not be rebuilt: each .md under docs/results/sequential has a runs/
    folder."""
    tables = {p.stem for p in SEQUENTIAL.glob("*.md")}
    assert tables <= set(sequential_models())


def test_the_fast_certification_tables_rebuild_from_their_rows(tmp_path):
    """evidence/fast_certification/fast_certification.sh's stage_tables (ISS against IAS, bf16 against fp32
    row by row, the headline ratio) from the archived rows alone, into a scratch folder: every table it
    writes equals the committed one, and every committed table but the checkpoint-only per-sample counts is
    written."""
    folder = RESULTS / "fast_certification"
    env = {**os.environ, "STAGE": "tables", "TABLES": str(tmp_path), "PY": sys.executable}
    script = str(REPO / "evidence" / "fast_certification" / "fast_certification.sh")
    done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    rebuilt = sorted(p.name for p in tmp_path.iterdir())
    from_checkpoint = {"agreement_samples_mnist.json"}  # stage_samples: not rebuilt from rows
    committed = sorted(p.name for p in folder.iterdir() if p.is_file() and p.name not in from_checkpoint)
    assert rebuilt == committed
    match, mismatch, errors = filecmp.cmpfiles(folder, tmp_path, rebuilt, shallow=False)
    assert (mismatch, errors) == ([], []), f"rebuilt differently: {mismatch + errors}"


def test_the_ars_clutter_report_rebuilds_from_its_rows(tmp_path):
    """evidence/ars_clutter/ars_clutter.sh's stage tables: the L-infinity report of ARS, its static mask and
    the vanilla baseline on cluttered MNIST, and the paired CIs docs/results.md quotes, from the archived rows
    alone."""
    folder = RESULTS / "ars_clutter"
    assert sorted(p.name for p in (folder / "runs").iterdir()) == ["ars", "ars_static", "ars_vanilla"]
    env = {**os.environ, "STAGE": "tables", "REPORTS": str(tmp_path), "PY": sys.executable}
    env.pop("ARCHIVE", None)  # the script's own: docs/results/ars_clutter/runs
    script = str(REPO / "evidence" / "ars_clutter" / "ars_clutter.sh")
    done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    files = [*REPORT_FILES, "paired_differences.txt", "paired_static_vanilla.txt"]
    match, mismatch, errors = filecmp.cmpfiles(folder, tmp_path, files, shallow=False)
    assert (mismatch, errors) == ([], []), f"rebuilt differently: {mismatch + errors}"


@pytest.mark.parametrize("name", sorted(p.name for p in (RESULTS / "noises").iterdir() if p.is_dir()))
def test_the_noise_comparison_report_rebuilds_from_its_rows(tmp_path, name):
    """evidence/noises/noise_comparison.sh's report: Gaussian, Laplace and uniform training noise, L1
    radii."""
    folder = RESULTS / "noises" / name
    runs = [str((folder / "runs" / noise).relative_to(REPO)) for noise in ("gaussian", "laplace", "uniform")]
    assert_report_rebuilds([*runs, "--compare-noises"], folder, tmp_path)
    # and the paired differences the docs quote, as the script writes them
    gaussian, laplace, uniform = runs
    radii = ["0", "0.5", "1", "1.5", "2"]
    for file, pair in (
        ("paired_differences.txt", [uniform, gaussian, laplace, "--compare-noises", "--radii", *radii]),
        (
            "paired_laplace_gaussian.txt",
            [laplace, gaussian, "--compare-noises", "--radii", *radii, "2.5", "3"],
        ),
    ):
        paired = run_script("-m rs_lightning.cli.report paired", *pair, timeout=600)
        assert paired.returncode == 0, paired.stderr[-2000:]
        assert paired.stdout == (folder / file).read_text(), f"{name}/{file} rebuilt differently"


def test_the_noise_envelope_in_the_docs_is_the_rows():
    """docs/results.md's envelope over sigma (best of each noise's sigma 0.5 and 1.0 models per radius)
    recomputed from the archived rows: catches a cell copied from the wrong sigma, noise or radius."""
    radii = [0, 0.5, 1, 1.5, 2, 2.5, 3]
    text = (REPO / "docs" / "results.md").read_text()
    for noise, label in (("gaussian", "Gaussian"), ("laplace", "Laplace"), ("uniform", "uniform")):
        best = {}
        for sigma in ("0.5", "1.0"):
            tag = "050" if sigma == "0.5" else "100"
            rows = read_results(RESULTS / "noises" / f"mnist_sigma{tag}" / "runs" / noise / "certify.tsv")
            for r in radii:
                value = 100 * float(np.mean((rows["correct"] == 1) & (rows["radius"] >= r)))
                if r not in best or value > best[r][0]:
                    best[r] = (value, sigma)
        row = " | ".join(f"{best[r][0]:.1f} ({best[r][1]})" for r in radii)
        line = next(x for x in text.splitlines() if x.startswith(f"| {label} | ") and "(0.5)" in x)
        assert line.replace("**", "") == f"| {label} | {row} |"


LATTICE = RESULTS / "lattice_noise"
LATTICE_RUNS = {  # (trained with, certified with): archived run folder
    (trained, certified): LATTICE / "runs" / f"trained_{trained}_certified_{certified}"
    for trained in ("gaussian", "gaussian_lattice")
    for certified in ("gaussian", "gaussian_lattice")
}


def test_the_lattice_noise_report_rebuilds_from_its_rows(tmp_path):
    """evidence/lattice_noise/lattice_noise.sh's report: MNIST LeNets trained with float and with lattice
    Gaussian noise, each certified under both; and the two paired comparisons the docs quote."""
    runs = [str(path.relative_to(REPO)) for path in LATTICE_RUNS.values()]
    assert_report_rebuilds([*runs, "--compare-noises"], LATTICE, tmp_path)
    radii = ["--radii", "0", "0.25", "0.5", "0.75"]
    for file, pair in (
        ("paired_certification_noise.txt", [runs[0], runs[1]]),
        ("paired_training_noise.txt", [runs[3], runs[1]]),
    ):
        paired = run_script(
            "-m rs_lightning.cli.report paired", *pair, "--compare-noises", *radii, timeout=600
        )
        assert paired.returncode == 0, paired.stderr[-2000:]
        assert paired.stdout == (LATTICE / file).read_text(), f"{file} rebuilt differently"


def test_the_lattice_noise_table_in_the_docs_is_the_rows():
    """docs/results.md's table of the four lattice-noise runs (certified accuracy at the grid, ACR)
    recomputed from the archived rows: catches a cell copied from another run or radius."""
    text = (REPO / "docs" / "results.md").read_text()
    names = {"gaussian": "float", "gaussian_lattice": "lattice"}
    for (trained, certified), folder in LATTICE_RUNS.items():
        rows = read_results(folder / "certify.tsv")
        ok = rows["correct"] == 1
        cells = [f"{100 * np.mean(ok & (rows['radius'] >= r)):.1f}" for r in (0, 0.25, 0.5, 0.75)]
        acr = f"{np.mean(np.where(ok, rows['radius'], 0)):.4f}"
        want = f"| {names[trained]} | {names[certified]} | " + " | ".join(cells) + f" | {acr} |"
        assert want in text, want
