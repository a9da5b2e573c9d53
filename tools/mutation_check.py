"""Mutation check of the statistical tests: each plausible bug, applied to a copy of HEAD, must fail them.

    python tools/mutation_check.py              # about 3 minutes on 2 cores; exit status 1 if a bug survives

Every mutant below is a bug the tests in tests/smoothing/ say they exist to catch (an off-by-one in the
Clopper–Pearson parameters, selecting the class from the estimation counts, a one-sided PREDICT test, an ISS
pilot drawn from the estimation stream, ...). The copy is a temporary ``git worktree`` of HEAD: uncommitted
changes are not checked, and the working tree is never modified.
"""

import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MUTANTS = [
    # (name, file, original text, mutated text, tests that must fail)
    (
        "sequential peeking (level alpha at every look)",
        "rs_lightning/smoothing/samplers/sequential.py",
        "out = np.full(n.shape, spec.alpha / len(looks))",
        "out = np.full(n.shape, spec.alpha)",
        "tests/smoothing/test_sequential.py::test_optional_stopping_just_below_a_grid_threshold",
    ),
    (
        "sequential certificate at alpha instead of alpha/K",
        "rs_lightning/smoothing/engine.py",
        "pa_lower = clopper_pearson_lower(n_a, n, draws.level)",
        "pa_lower = clopper_pearson_lower(n_a, n, spec.alpha)",
        "tests/smoothing/test_sequential.py::test_sequential_certify_is_sound_on_the_halfspace",
    ),
    (
        "sequential look restarts the noise stream",
        "rs_lightning/smoothing/samplers/sequential.py",
        "more = count(Phase.ESTIMATION, stop - starts, rows=open_, first_block=starts // block)",
        "more = count(Phase.ESTIMATION, stop - starts, rows=open_, first_block=0)",
        "tests/smoothing/test_sequential.py::test_the_first_n_draws_are_cohens_estimation_draws",
    ),
    (
        "sequential beta in the certificate (the stop-only upper bound's level)",
        "rs_lightning/smoothing/samplers/sequential.py",
        "return Draws(counts0, selected, counts, n, n0, n0 + n, sampler.levels(spec, n, n_a0, dim))",
        "return Draws(counts0, selected, counts, n, n0, n0 + n,"
        " sampler.stop_level(spec, sampler.levels(spec, n, n_a0, dim)))",
        "tests/smoothing/test_sequential_levers.py::test_beta_only_decides_when_to_stop_never_the_certificate",
    ),
    (
        "sequential selection spending over alpha (alpha/2 plus alpha/K at the other looks)",
        "rs_lightning/smoothing/samplers/sequential.py",
        "rest = spec.alpha / (2 * others) if others else spec.alpha",
        "rest = spec.alpha / len(looks)",
        "tests/smoothing/test_sequential_levers.py::test_selection_spending_sums_to_alpha_over_each_inputs_looks",
    ),
    (
        "cp off-by-one (k+1, n-k)",
        "rs_lightning/smoothing/stats.py",
        "bound = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)",
        "bound = beta.ppf(alpha, k + 1, np.maximum(n - k, 1e-300))",
        "tests/smoothing/test_soundness.py::test_certify_is_sound_and_tight_on_an_analytic_classifier",
    ),
    (
        "cp missing +1 (k, n-k)",
        "rs_lightning/smoothing/stats.py",
        "bound = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)",
        "bound = beta.ppf(alpha, np.maximum(k, 1e-300), np.maximum(n - k, 1e-300))",
        "tests/smoothing/test_soundness.py::test_certify_is_sound_and_tight_on_an_analytic_classifier",
    ),
    (
        "cp two-sided alpha",
        "rs_lightning/smoothing/stats.py",
        "bound = beta.ppf(alpha, np.maximum(k, 1e-300), n - k + 1)",
        "bound = beta.ppf(alpha / 2, np.maximum(k, 1e-300), n - k + 1)",
        "tests/smoothing/test_soundness.py::test_certify_is_sound_and_tight_on_an_analytic_classifier",
    ),
    (
        "wald bound",
        "rs_lightning/smoothing/stats.py",
        "    return np.where(k <= 0, 0.0, bound)\n\n\ndef clopper_pearson_upper",
        "    from scipy.stats import norm as _n\n    p = k / n\n"
        "    return np.clip(p - _n.ppf(1 - alpha) * np.sqrt(p * (1 - p) / n), 0, 1)\n\n\n"
        "def clopper_pearson_upper",
        "tests/smoothing/test_soundness.py::test_certify_is_sound_and_tight_on_an_analytic_classifier",
    ),
    (
        "select from estimation counts",
        "rs_lightning/smoothing/samplers/base.py",
        "return Draws(counts0, counts0.argmax(dim=1), counts, n, n0, n0 + n, np.full(groups, spec.alpha))",
        "return Draws(counts0, counts.argmax(dim=1), counts, n, n0, n0 + n, np.full(groups, spec.alpha))",
        "tests/smoothing/test_soundness.py::test_certify_at_the_decision_boundary_certifies_at_rate_alpha",
    ),
    (
        "iss pilot from the estimation stream",
        "rs_lightning/smoothing/samplers/iss.py",
        "counts0 = count(Phase.PILOT, k0)",
        "counts0 = count(Phase.ESTIMATION, k0)",
        "tests/smoothing/test_soundness.py -k test_iss",
    ),
    (
        "iss bound with n instead of k_hat",
        "rs_lightning/smoothing/engine.py",
        "pa_lower = clopper_pearson_lower(n_a, n, draws.level)",
        "pa_lower = clopper_pearson_lower(n_a, spec.n if spec.sampling == 'iss' else n, draws.level)",
        "tests/smoothing/test_soundness.py::test_iss_default_mode_is_sound_given_its_pilot",
    ),
    (
        "iss default reuses pilot",
        "rs_lightning/smoothing/samplers/iss.py",
        "        if not self.reuse_pilot:",
        "        if False:",
        "tests/smoothing/test_soundness.py -k test_iss",
    ),
    (
        "predict one-sided test",
        "rs_lightning/smoothing/stats.py",
        "return float(binomtest(int(n_top), total, 0.5).pvalue)",
        "return float(binomtest(int(n_top), total, 0.5, alternative='greater').pvalue)",
        "tests/smoothing/test_soundness.py::test_predict_at_the_decision_boundary_answers_at_rate_alpha",
    ),
    (
        "predict at 2 alpha",
        "rs_lightning/smoothing/engine.py",
        "predict = np.where(pvalue > spec.alpha,",
        "predict = np.where(pvalue > 2 * spec.alpha,",
        "tests/smoothing/test_soundness.py::test_predict_at_the_decision_boundary_answers_at_rate_alpha",
    ),
    (
        "predict at alpha/2",
        "rs_lightning/smoothing/engine.py",
        "predict = np.where(pvalue > spec.alpha,",
        "predict = np.where(pvalue > spec.alpha / 2,",
        "tests/smoothing/test_soundness.py::test_predict_at_the_decision_boundary_answers_at_rate_alpha",
    ),
    (
        "Smooth reuses call 0's noise",
        "rs_lightning/smoothing/smooth.py",
        "next(self._calls) if index is None else index",
        "0 if index is None else index",
        "tests/smoothing/test_engine.py::test_repeated_calls_draw_fresh_noise_and_an_index_pins_it",
    ),
    (
        "precision ignored",
        "rs_lightning/smoothing/precision.py",
        "        self.autocast_dtype = AUTOCAST_DTYPES.get(self.precision)",
        "        self.autocast_dtype = None",
        "tests/smoothing/test_engine.py::test_bf16_really_runs_the_network_in_bfloat16",
    ),
    (
        "non-finite logits unchecked",
        "rs_lightning/smoothing/engine.py",
        "    if bool(nonfinite.any()):",
        "    if False:",
        "tests/smoothing/test_engine.py::test_non_finite_logits_stop_certification_naming_the_input",
    ),
    # Adaptive RS (Lyu et al., NeurIPS 2024; the pipeline's accounting and independence properties)
    (
        "ars: the mask sees the clean x",
        "rs_lightning/models/ars.py",
        "w = self.mask(m1).to(x.dtype)",
        "w = self.mask(x).to(x.dtype)",
        "tests/models/test_ars_pipeline.py::test_the_mask_never_sees_the_clean_input",
    ),
    (
        "ars: mask norm without the channel factor",
        "rs_lightning/models/ars.py",
        "return math.sqrt(channels) * w.flatten(1).norm(dim=1)",
        "return w.flatten(1).norm(dim=1)",
        "tests/models/test_ars_pipeline.py::test_all_ones_mask_with_half_budget_is_cohens_noise",
    ),
    (
        "ars: the second query reuses the first noise",
        "rs_lightning/models/ars.py",
        "m2 = w * x + s2 * noise[:, 1]",
        "m2 = w * x + s2 * noise[:, 0]",
        "tests/smoothing/test_ars_soundness.py::test_certify_around_an_adaptive_pipeline_is_sound",
    ),
    (
        "ars: average of m2 instead of m2 / w",
        "rs_lightning/models/ars.py",
        "return (v2 * m1 + v1 * w * m2) / (v2 + v1 * w * w)",
        "return (v2 * m1 + v1 * m2) / (v2 + v1)",
        "tests/models/test_ars_pipeline.py::test_average_is_unbiased_and_has_variance_sigma_squared_for_constant_masks",
    ),
    (
        "linf radius over H*W instead of C*H*W",
        "rs_lightning/smoothing/engine.py",
        "spec.certificate.radius(pa_lower, sigma, xs[0].numel())",
        "spec.certificate.radius(pa_lower, sigma, xs[0][0].numel())",
        "tests/models/test_ars_pipeline.py::test_certify_around_the_pipeline_is_batch_independent_and_linf_only",
    ),
    # beyond the statistics: bugs that once survived every test
    (
        "published ResNet BasicBlock without its final ReLU",
        "rs_lightning/models/cifar_resnet.py",
        "return self.relu(out + residual)",
        "return out + residual",
        "tests/models/test_published.py::"
        "test_loaded_resnet_matches_an_independent_functional_forward_of_the_published_architecture",
    ),
    (
        "published LeNet without the ReLU after fc1",
        "rs_lightning/models/lenet.py",
        "return self.fc2(F.relu(self.fc1(x.flatten(1))))",
        "return self.fc2(self.fc1(x.flatten(1)))",
        "tests/models/test_published.py::"
        "test_loaded_lenet_matches_an_independent_functional_forward_of_the_published_architecture",
    ),
    (
        "reweighting only the first time (condition)",
        "rs_lightning/data/curation.py",
        "(epoch - self.ds_epoch) % self.reweight_every == 0 or self.sampler.weights is None",
        "self.sampler.weights is None",
        "tests/data/test_curation.py",
    ),
    (
        "re-estimated weights not applied after the first time",
        "rs_lightning/data/curation.py",
        "        self.sampler.set_weights(weights)\n",
        "        if self.sampler.weights is None:\n            self.sampler.set_weights(weights)\n",
        "tests/data/test_curation.py",
    ),
    (
        "budget plug-in floors p*N' instead of rounding",
        "rs_lightning/analysis/budget.py",
        "return np.floor(np.asarray(pa, dtype=float) * budget + 0.5)",
        "return np.floor(np.asarray(pa, dtype=float) * budget)",
        "tests/analysis/test_budget.py::test_plugin_rule_rounds_p_hat_times_n_prime_at_a_budget_other_than_the_runs",
    ),
    (
        "constant reference of class 0 instead of the majority class",
        "rs_lightning/analysis/run_view.py",
        "label = max(shares, key=lambda c: (shares[c], -c))",
        "label = 0",
        "tests/analysis/test_compare.py::"
        "test_constant_reference_is_the_majority_class_with_its_share_and_closed_form_acr",
    ),
    (
        "an MNIST-shaped .npz run not recognised as MNIST",
        "rs_lightning/analysis/published_numbers.py",
        'if shape == expected and int(data.get("num_classes") or 0) == 10:',
        'if shape != expected and int(data.get("num_classes") or 0) == 10:',
        "tests/cli/test_report_published_npz.py",
    ),
    (
        "lattice edges at Phi(k/(255 sigma)) instead of Phi((k+1/2)/(255 sigma))",
        "rs_lightning/smoothing/noises/gaussian_lattice.py",
        "mpmath.ncdf((k + mpmath.mpf(1) / 2) / s)",
        "mpmath.ncdf(k / s)",
        "tests/smoothing/test_lattice_noise.py::test_the_draws_follow_the_exact_pmf_and_a_mutated_pmf_is_rejected",
    ),
    (
        "lattice offsets one level off",
        "rs_lightning/smoothing/noises/gaussian_lattice.py",
        "j = (slot - (half_width + 1)).to(torch.int32)",
        "j = (slot - half_width).to(torch.int32)",
        "tests/smoothing/test_lattice_noise.py::test_the_draws_follow_the_exact_pmf_and_a_mutated_pmf_is_rejected",
    ),
    (
        "lattice radius without the d*tau slack",
        "rs_lightning/smoothing/noises/gaussian_lattice.py",
        "return scale * normal.ppf(np.clip(p - self.slack(lam, dim), 0.5, 1.0))",
        "return scale * normal.ppf(np.clip(p, 0.5, 1.0))",
        "tests/smoothing/test_lattice_noise.py::test_the_certificate_gives_up_d_tau_of_pa",
    ),
]


def main() -> int:
    survivors = []
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), "HEAD"], check=True
        )
        try:
            for name, path, old, new, tests in MUTANTS:
                file = tree / path
                text = file.read_text()
                if old not in text:
                    raise SystemExit(
                        f"error: mutant {name!r} no longer applies to {path}; update this script's MUTANTS"
                    )
                file.write_text(text.replace(old, new))
                command = [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-x",
                    "-p",
                    "no:cacheprovider",
                    *tests.split(),
                ]
                done = subprocess.run(command, cwd=tree, capture_output=True, text=True)
                file.write_text(text)
                last = (
                    done.stdout.strip().splitlines()[-1]
                    if done.stdout.strip()
                    else done.stderr.strip()[-200:]
                )
                print(f"{'caught  ' if done.returncode else 'SURVIVED'}  {name}: {last}", flush=True)
                if done.returncode == 0:
                    survivors.append(name)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    print(f"{len(MUTANTS) - len(survivors)} of {len(MUTANTS)} mutants caught")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
