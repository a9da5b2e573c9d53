"""Comparing runs: ECDF dominance and crossings, ACR disagreements, the protocol check, old Cohen TSVs."""

import json

import numpy as np
import pytest
from run_folders import write_run_folder as write_run

from rs_lightning.analysis import ECDF_GRID, pa_ecdf
from rs_lightning.analysis.compare import comparison_table, dominance, ecdf_relation
from rs_lightning.analysis.protocol import ProtocolMismatchError, check_protocol, partly_unverified
from rs_lightning.analysis.run_view import assign_labels, find_run_paths, load_run, load_runs
from rs_lightning.runs import ResultFileError, RunRecord

COHEN_TSV = (
    "idx\tlabel\tpredict\tradius\tcorrect\ttime\n"
    "0\t3\t3\t0.512\t1\t0:00:01.250000\n"
    "20\t8\t-1\t0.0\t0\t0:00:01.100000\n"
    "40\t0\t0\t0.91\t1\t0:00:01.000000\n"
    "60\t2\t5\t0.3\t0\t0:00:01.000000\n"
)


def test_ecdf_relation_dominating_crossing_identical():
    a = pa_ecdf(np.r_[np.full(6, 0.8), np.zeros(4)])  # 60% of inputs at pA = 0.8
    b = pa_ecdf(np.r_[np.full(4, 0.95), np.zeros(6)])  # 40% at pA = 0.95
    relation, crossings = ecdf_relation(a, b)
    assert relation == "crosses" and crossings == [0.801]  # a leads up to 0.800, b from 0.801 on
    assert ecdf_relation(b, a) == ("crosses", [0.801])
    c = pa_ecdf(np.r_[np.full(6, 0.95), np.zeros(4)])
    assert ecdf_relation(c, b) == ("dominates", [])
    assert ecdf_relation(b, c) == ("dominated", [])
    assert ecdf_relation(a, a.copy()) == ("identical", [])
    twice = pa_ecdf(np.r_[0.6, 0.6, 0.6, 0.6, 0.99, 0.99])  # leads below 0.6 and in (0.8, 0.99]
    other = pa_ecdf(np.r_[0.8, 0.8, 0.8, 0.8, 0.0, 0.0])
    assert ecdf_relation(twice, other, ECDF_GRID) == ("crosses", [0.601, 0.801])


def test_dominance_and_acr_disagreement(tmp_path):
    # A: every input has p̂ = 1 at N = 100 (radius cap 0.375); B: p̂ = 0.999 at N = 1e5 (radius ~0.76).
    # A's ECDF dominates B's, but B's larger N gives it the larger ACR: the report must flag it.
    a = load_run(write_run(tmp_path / "a", np.full(20, 100), n=100))
    b = load_run(write_run(tmp_path / "b", np.full(20, 99_900), n=100_000))
    c = load_run(write_run(tmp_path / "c", np.full(20, 99), n=100))
    runs = [a, b, c]
    assign_labels(runs)
    pairs = {(p["a"], p["b"]): p for p in dominance(runs)}
    ab = pairs[(a.label, b.label)]
    assert ab["relation"] == "dominates" and ab["acr_a"] < ab["acr_b"] and ab["acr_disagrees"]
    ac = pairs[(a.label, c.label)]
    assert ac["relation"] == "dominates" and not ac["acr_disagrees"]
    with pytest.raises(ProtocolMismatchError, match=r"\bn: .*100000.*--allow-mismatch"):
        check_protocol(runs)


def test_protocol_check_lists_what_differs(tmp_path):
    base = write_run(tmp_path / "base", np.full(10, 990))
    same = write_run(tmp_path / "same", np.full(10, 950))
    runs = load_runs([base, same])
    assign_labels(runs)
    assert check_protocol(runs) == {}
    other_subset = write_run(tmp_path / "subset", np.full(10, 990), idx=np.arange(1, 11))
    other_alpha = write_run(tmp_path / "alpha", np.full(10, 990), alpha=0.01, seed=1)
    runs = load_runs([base, other_subset, other_alpha])
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError) as err:
        check_protocol(runs)
    message = str(err.value)
    assert "subset:" in message and "alpha:" in message and "seed:" in message and "N:" not in message
    assert "shared by all: 9 inputs" in message
    differences = check_protocol(runs, allow_mismatch=True)
    assert set(differences) == {"subset", "alpha", "seed"}
    table = comparison_table(runs, [0.0, 0.25], reference=runs[0])
    assert [row["protocol"] for row in table] == ["reference", "differs: subset", "differs: alpha, seed"]


def test_old_cohen_tsv_gives_acr_and_accuracy_but_no_ecdf(tmp_path):
    path = tmp_path / "noise_0.25.tsv"
    path.write_text(COHEN_TSV)
    run = load_run(path, sigma=0.25)
    assign_labels([run])
    assert not run.has_counts and run.pa() is None and run.ecdf() is None
    assert run.acr == pytest.approx((0.512 + 0.91) / 4)
    np.testing.assert_allclose(run.certified_accuracy([0.0, 0.6]), [0.5, 0.25])
    assert run.label == "noise_0.25 σ=0.25"
    assert "no" in run.limitations() and "pA ECDF" in run.limitations()
    row = comparison_table([run], [0.0])[0]
    assert row["acr"] == run.acr and row["y(0.5)"] is None and row["n"] is None
    assert dominance([run, run]) == []


def test_multirun_folders_are_searched_and_bad_folders_are_named(tmp_path):
    sweep = tmp_path / "multirun"
    write_run(sweep / "0_sigma=0.25", np.full(5, 990))
    write_run(sweep / "1_sigma=0.5", np.full(5, 990), sigma=0.5)
    assert [p.name for p in find_run_paths([sweep])] == ["0_sigma=0.25", "1_sigma=0.5"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultFileError, match=r"empty holds no certify.tsv"):
        find_run_paths([tmp_path / "empty"])
    with pytest.raises(ResultFileError, match=r"missing does not exist"):
        find_run_paths([tmp_path / "missing"])
    (tmp_path / "blank").mkdir()
    (tmp_path / "blank" / "certify.tsv").write_text("")
    with pytest.raises(ResultFileError, match=r"blank/certify.tsv is empty"):
        load_run(tmp_path / "blank")
    header_only = tmp_path / "header"
    header_only.mkdir()
    (header_only / "certify.tsv").write_text(COHEN_TSV.splitlines()[0] + "\n")
    with pytest.raises(ResultFileError, match=r"header/certify.tsv holds no result rows"):
        load_run(header_only)
    broken = write_run(tmp_path / "broken", np.full(5, 990))
    (broken / "settings.json").write_text("{not json")
    with pytest.raises(ResultFileError, match=r"broken/settings.json is unreadable"):
        load_run(broken)


def test_labels_are_unique_and_table_matches_the_rows(tmp_path):
    runs = load_runs(
        [write_run(tmp_path / "x" / "run", np.full(8, 990)), write_run(tmp_path / "y" / "run", [990] * 8)]
    )
    for run in runs:
        run.method = "GaussianAugmentation"
    assign_labels(runs)
    assert runs[0].label != runs[1].label and runs[0].label.startswith("GaussianAugmentation σ=0.25")
    row = comparison_table(runs, [0.0, 0.5])[0]
    assert row["n"] == 1000 and row["alpha"] == 0.001 and row["inputs"] == 8
    assert row["ca@0"] == 1.0 and row["y(0.99)"] == 1.0 and row["y(1)"] == 0.0


def test_constant_reference_is_the_majority_class_with_its_share_and_closed_form_acr(tmp_path):
    """Without a ConstantClassifier in the settings, the reference h ≡ c beside a run is its majority class:
    labels 2, 7, 7, 7, 5, 7, 3, 3 (first label 2, class 0 absent) give c = 7, π_c = 4/8 and the closed form
    π_c·σ·Φ⁻¹(α^(1/N′)) (Sun et al. 2025, Thm. 1) at the run's σ and α; a tie goes to the smaller class; a
    ConstantClassifier run keeps its own label.

    Exists to catch a one-line mutation of the majority branch of ``Run.constant_reference``
    (rs_lightning/analysis/compare.py), e.g. ``label = max(shares, ...)`` -> ``label = 0`` or ->
    ``label = int(self.rows["label"][0])``, or ``max`` -> ``min``, which no other test exercises."""
    from scipy.stats import norm

    from rs_lightning.analysis.budget import constant_classifier_acr
    from rs_lightning.analysis.run_view import Run

    idx = [12, 7, 17, 27, 35, 47, 3, 13]  # write_run's label is idx % 10
    run = load_run(write_run(tmp_path / "run", np.full(8, 990), idx=idx, sigma=0.25, alpha=0.001))
    assert run.rows["label"].tolist() == [2, 7, 7, 7, 5, 7, 3, 3]
    c, share = run.constant_reference()
    assert (c, share) == (7, 0.5)
    for budget in (100, 1000, 10_000):
        want = 0.5 * 0.25 * norm.ppf(0.001 ** (1 / budget))
        got = constant_classifier_acr(share, run.radius_scale, run.alpha, budget)
        assert got == pytest.approx(want, rel=1e-9)

    def reference(labels, model=None):
        settings = RunRecord.from_dict({} if model is None else {"model": model})
        return Run(
            path=tmp_path / "x.tsv", rows={"label": np.asarray(labels)}, settings=settings
        ).constant_reference()

    assert reference([8, 3, 8, 3, 1]) == (3, 0.4)  # tie between 3 and 8: the smaller class
    assert reference([4, 9, 9, 0, 9]) == (9, 0.6)
    constant = {"_target_": "rs_lightning.models.constant.ConstantClassifier", "label": 4}
    assert reference([4, 9, 9, 0, 9], constant) == (4, 0.2)  # its own label, not the majority


def test_compare_noises_lets_the_noise_differ_and_nothing_else(tmp_path):
    """--compare-noises (Yang et al. 2020 compare noises in one ball): a different noise passes, any other
    difference is still refused (the bug: a flag as broad as --allow-mismatch), and a noise-only difference
    without the flag names --compare-noises."""
    gaussian = write_run(tmp_path / "g", np.full(10, 990), norm="l1")
    laplace = write_run(tmp_path / "l", np.full(10, 990), noise="laplace", norm="l1")
    runs = load_runs([gaussian, laplace])
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError, match=r"noise: .*laplace.*--compare-noises") as err:
        check_protocol(runs)
    assert "--allow-mismatch" not in str(err.value)
    assert set(check_protocol(runs, compare_noises=True)) == {"noise"}
    other_n = write_run(tmp_path / "n", np.full(10, 990), n=2000, noise="laplace", norm="l1")
    runs = load_runs([gaussian, other_n])
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError, match=r"\bn: .*--allow-mismatch") as err:
        check_protocol(runs, compare_noises=True)
    message = str(err.value)  # only what the flag does not cover is named
    assert "(n: " in message and "(noise: " not in message and "; noise: " not in message


def _record(folder, **values):
    settings = json.loads((folder / "settings.json").read_text())
    (folder / "settings.json").write_text(json.dumps(settings | values))
    return folder


def test_a_key_recorded_later_is_compared_where_recorded_and_said_unverified_elsewhere(tmp_path):
    """inputs_sha256 (and the dataset) were recorded from some version on: a run certified before is compared
    with newer ones on the rest of the protocol (the bug this catches the other way: two runs whose recorded
    hashes differ compared silently), and the report is told which runs it could not verify."""
    old = write_run(tmp_path / "old", np.full(10, 990))
    new = _record(write_run(tmp_path / "new", np.full(10, 950)), inputs_sha256="aa")
    runs = load_runs([old, new])
    assign_labels(runs)
    assert check_protocol(runs) == {}
    assert partly_unverified(runs) == {"inputs_sha256": [runs[0].label]}  # dataset: by none (not "partly")
    other = _record(write_run(tmp_path / "other", np.full(10, 950)), inputs_sha256="bb")
    runs = load_runs([old, new, other])
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError, match="inputs_sha256: .*aa.*bb"):
        check_protocol(runs)
    noise_block = _record(write_run(tmp_path / "block", np.full(10, 950)), noise_block=4)
    runs = load_runs([old, noise_block])  # None is a setting for other keys: no noise block against 4
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError, match="noise_block: "):
        check_protocol(runs)


def test_the_same_indices_of_another_dataset_are_refused(tmp_path):
    """Catches two runs on different data with the same indices compared silently (the dataset's name and
    file hash are protocol keys)."""
    mnist = _record(write_run(tmp_path / "a", np.full(10, 990)), data={"name": "npz", "sha256": "aa"})
    other = _record(write_run(tmp_path / "b", np.full(10, 990)), data={"name": "npz", "sha256": "bb"})
    runs = load_runs([mnist, other])
    assign_labels(runs)
    with pytest.raises(ProtocolMismatchError, match="dataset: .*npz aa.*npz bb"):
        check_protocol(runs)


def test_the_reports_default_radii_fit_uniform_linf_radii(tmp_path):
    """Uniform noise's L∞ radii (~2λ·ln 2/d) lie far below the L∞ step 1/255: the default grid steps by a
    tenth of the largest certified radius instead (the bug: a table with the single column r = 0)."""
    from rs_lightning.analysis.compare import default_radii

    run = load_run(
        write_run(
            tmp_path / "u",
            np.linspace(900, 1000, 10).astype(int),
            noise="uniform",
            norm="linf",
            sigma=0.5,
            dim=784,
        )
    )
    top = float(run.rows["radius"].max())
    assert 0 < top < 1 / 255
    radii = default_radii([run])
    assert len(radii) >= 10 and radii[-1] <= top < radii[-1] + radii[1]
