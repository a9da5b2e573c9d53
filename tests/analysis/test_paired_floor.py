"""The oracle floor of a sequential run at its own p̂ and at a fixed-n run's p̂ on the same inputs
(``Run.oracle_floor``), and why the second exists: a p̂ taken at a stopping time is biased toward a decision.

The rule is simulated through the real ``Sequential.estimate`` on binomial draws; the fixed-n reference's
counts are Binomial(n, p_A) with the same p_A; the floor at the true p_A is the yardstick.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from rs_lightning.analysis.metrics import draws_over_floor
from rs_lightning.analysis.run_view import Run
from rs_lightning.runs import ResultFileError, RunRecord
from rs_lightning.smoothing import CertificationSpec, Sequential

RADII = (0.0, 0.25, 0.5, 0.75)  # thresholds Φ(r/0.5): 0.5, 0.69, 0.84, 0.93
N = 100_000
SEQ = CertificationSpec(sigma=0.5, n0=100, n=N, alpha=0.001, sampler=Sequential(radii=RADII)).resolved(2)
COHEN = CertificationSpec(sigma=0.5, n0=100, n=N, alpha=0.001).resolved(2)


def run_of(spec: CertificationSpec, n_a, n, n_a0, predict=None, name="run") -> Run:
    m = len(n)
    rows = {
        "idx": np.arange(m) * 7,
        "predict": np.zeros(m, int) if predict is None else np.asarray(predict),
        "correct": np.ones(m, int),
        "radius": np.zeros(m),
        "nA": np.asarray(n_a),
        "n": np.asarray(n),
        "nA0": np.asarray(n_a0),
    }
    return Run(Path(name), rows, RunRecord(**spec.as_dict(), dim=2))


def simulate(inputs: int, seed: int):
    """(sequential run, fixed-n reference, true p_A) on ``inputs`` inputs with p_A uniform on [0.55, 0.97]."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.55, 0.97, inputs)
    n_a0 = rng.binomial(SEQ.n0, p)
    n_a, n = SEQ.sampler.estimate(SEQ, lambda o, start, stop: rng.binomial(stop - start, p[o]), n_a0, 2)
    sequential = run_of(SEQ, n_a, n, n_a0, name="sequential")
    reference = run_of(COHEN, rng.binomial(N, p), np.full(inputs, N), n_a0, name="cohen")
    return sequential, reference, p


def test_the_floor_at_a_fixed_n_runs_p_hat_is_unbiased_where_the_rows_own_is_low():
    """At a stopping time p̂ sits further from the nearest threshold than p_A (an input stops when its counts
    look decisive), so the mean floor at the rows' own p̂ is low: 0.85–0.91 of the floor at p_A over six seeds
    of 2,000 inputs, asserted < 0.95. The floor at the reference's p̂ was within 0.992–1.016 of it, asserted
    within ±4 %. Catches the paired floor computed from the run's own rows (``at`` ignored: 0.85–0.91, fails)
    or from the reference's rows in the wrong order (an unrelated input's p̂)."""
    sequential, reference, p = simulate(2000, seed=0)
    truth = SEQ.sampler.oracle_floor(SEQ, p, np.ones_like(p), 2).mean()
    own, paired = sequential.oracle_floor().mean(), sequential.oracle_floor(at=reference).mean()
    assert own < 0.95 * truth
    assert paired == pytest.approx(truth, rel=0.04)
    n = sequential.rows["n"]
    assert draws_over_floor(n, sequential.oracle_floor(at=reference)) == pytest.approx(n.mean() / paired)


def test_the_paired_floor_follows_idx_not_row_order_and_the_class_each_run_selected():
    """The reference's rows matched by idx (a shuffled reference gives the same floor); where the two runs
    selected different classes (different predictions and selection counts) the row's own p̂ is kept, since
    the reference's nA counts another class. Catches position-wise pairing and pairing across classes."""
    sequential, reference, _ = simulate(50, seed=1)
    want = sequential.oracle_floor(at=reference)
    order = np.random.default_rng(2).permutation(50)
    shuffled = dataclasses.replace(reference, rows={k: v[order] for k, v in reference.rows.items()})
    np.testing.assert_array_equal(sequential.oracle_floor(at=shuffled), want)
    other = dict(reference.rows, predict=np.where(np.arange(50) < 10, 3, 0), nA0=reference.rows["nA0"] + 1)
    other = dataclasses.replace(reference, rows=other)
    got, own = sequential.oracle_floor(at=other), sequential.oracle_floor()
    np.testing.assert_array_equal(got[:10], own[:10])
    np.testing.assert_array_equal(got[10:], want[10:])
    assert not np.array_equal(want[:10], own[:10])  # the case is not vacuous


def test_a_paired_floor_needs_a_fixed_n_run_of_the_same_noise_and_inputs():
    sequential, reference, _ = simulate(20, seed=3)
    assert reference.oracle_floor() is None  # fixed n: no floor of its own
    assert reference.paired_with(sequential) is None
    wider = dataclasses.replace(reference, settings=dataclasses.replace(reference.settings, sigma=0.25))
    fewer = dataclasses.replace(reference, rows={k: v[:10] for k, v in reference.rows.items()})
    for bad, words in ((sequential, "varies by input"), (wider, "sigma=0.25"), (fewer, "lacks some")):
        assert words in bad.paired_with(sequential)
        with pytest.raises(ResultFileError, match=words):
            sequential.oracle_floor(at=bad)


def test_the_reports_settings_table_shows_both_floors():
    """The report's sampling column: draws ÷ floor at the rows' own p̂, then at the fixed-n run's p̂ when the
    comparison holds one of the same inputs and noise (and only the first when it does not)."""
    from rs_lightning.cli.report.compare import _protocol_section

    sequential, reference, _ = simulate(40, seed=4)
    sequential, reference = (dataclasses.replace(r, label=r.name) for r in (sequential, reference))
    n = sequential.rows["n"]
    own = draws_over_floor(n, sequential.oracle_floor())
    paired = draws_over_floor(n, sequential.oracle_floor(at=reference))
    text = "\n".join(_protocol_section([reference, sequential], {}, []))
    assert f"; draws / oracle floor {own:.2f} (at cohen's p̂: {paired:.2f})" in text
    alone = "\n".join(_protocol_section([sequential], {}, []))
    assert f"; draws / oracle floor {own:.2f} |" in alone
