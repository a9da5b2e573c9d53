"""The batched CERTIFY/PREDICT engine: determinism, noise streams, precision, non-finite logits, the API.

The statistical soundness tests are in ``test_soundness.py``.
"""

import warnings

import numpy as np
import pytest
import torch
from scipy.stats import norm
from stat_testing import Halfspace
from torch import nn

from rs_lightning.models import DigitsCNN
from rs_lightning.smoothing import (
    ABSTAIN,
    CertificationSpec,
    Cohen,
    InputSpecific,
    NonFiniteLogitsError,
    Phase,
    Smooth,
    certify_batch,
    predict_batch,
    prepare,
    sample_counts,
)
from rs_lightning.validation import ConfigError


class Constant(nn.Module):
    def __init__(self, label: int, num_classes: int = 10):
        super().__init__()
        self.label, self.num_classes = label, num_classes

    def forward(self, x):
        out = torch.zeros(len(x), self.num_classes)
        out[:, self.label] = 1.0
        return out


class Recorder(nn.Module):
    """Halfspace that keeps every noisy batch it sees."""

    def __init__(self):
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x):
        self.seen.append(x.clone())
        return Halfspace()(x)


@pytest.fixture(scope="module")
def cnn():
    torch.manual_seed(0)
    return DigitsCNN(input_shape=(1, 8, 8), num_classes=10).eval()


def spec(**kw) -> CertificationSpec:
    return CertificationSpec(**({"sigma": 0.5, "n0": 100, "n": 700, "alpha": 0.001, "batch_size": 1000} | kw))


def test_results_identical_across_batch_sizes_and_input_order(cnn):
    xs = torch.rand(5, 1, 8, 8)
    indices = [3, 17, 4, 250, 9]
    runs = [
        certify_batch(cnn, xs, indices, spec(batch_size=b), num_classes=10) for b in (1, 37, 256, 1000, 4000)
    ]
    for other in runs[1:]:
        np.testing.assert_array_equal(other.counts, runs[0].counts)
        np.testing.assert_array_equal(other.n_a0, runs[0].n_a0)
        np.testing.assert_array_equal(other.predict, runs[0].predict)
    # the same inputs in another order and group (as another rank, shard or resume would see them)
    order = [4, 0, 2]
    part = certify_batch(cnn, xs[order], [indices[i] for i in order], spec(batch_size=64), num_classes=10)
    np.testing.assert_array_equal(part.counts, runs[0].counts[order])
    assert runs[0].counts.sum(axis=1).tolist() == [700] * 5
    assert (runs[0].n == 700).all() and (runs[0].samples == 800).all()


def test_noise_depends_on_seed_index_and_phase(cnn):
    x = torch.rand(1, 1, 8, 8).repeat(2, 1, 1, 1)
    kw = dict(num_samples=300, sigma=1.0, num_classes=10, batch_size=1000)
    a = sample_counts(cnn, x, [0, 1], phase=Phase.ESTIMATION, seed=0, **kw)
    b = sample_counts(cnn, x, [0, 1], phase=Phase.SELECTION, seed=0, **kw)
    c = sample_counts(cnn, x, [0, 1], phase=Phase.ESTIMATION, seed=1, **kw)
    d = sample_counts(cnn, x, [0, 1], phase=Phase.PILOT, seed=0, **kw)
    assert not torch.equal(a[0], a[1])  # same input, different index: different noise
    assert not torch.equal(a, b) and not torch.equal(a, c) and not torch.equal(a, d)


def test_per_input_sample_sizes_are_prefixes_of_the_same_stream(cnn):
    """Input-specific sizes draw the first k of the input's stream: k = 700 counts equal a 700-draw run,
    whatever the other inputs' sizes (so ISS's estimation draws are a prefix of the full-budget run's)."""
    xs = torch.rand(3, 1, 8, 8)
    kw = dict(phase=Phase.ESTIMATION, sigma=0.5, num_classes=10, batch_size=333)
    mixed = sample_counts(cnn, xs, [5, 6, 7], num_samples=[700, 0, 1300], **kw)
    alone = sample_counts(cnn, xs[[0]], [5], num_samples=700, **kw)
    assert torch.equal(mixed[0], alone[0]) and int(mixed[1].sum()) == 0 and int(mixed[2].sum()) == 1300


def test_constant_classifier_reaches_the_radius_cap():
    result = certify_batch(
        Constant(3), torch.rand(4, 1, 8, 8), [0, 1, 2, 3], spec(n0=10, n=2000), num_classes=10
    )
    assert (result.predict == 3).all() and (result.n_a == 2000).all()
    np.testing.assert_allclose(result.radius, 0.5 * norm.ppf(0.001 ** (1 / 2000)), rtol=1e-12)


def test_smooth_api_matches_cohen_semantics(cnn):
    smooth = Smooth(cnn, num_classes=10, sigma=0.25)
    x = torch.rand(1, 8, 8)
    label, radius = smooth.certify(x, n0=100, n=1000, alpha=0.001, batch_size=200, index=7)
    batched = certify_batch(cnn, x[None], [7], spec(sigma=0.25, n=1000), num_classes=10)
    assert (label, radius) == (int(batched.predict[0]), pytest.approx(float(batched.radius[0])))
    assert Smooth.ABSTAIN == ABSTAIN == -1
    # without an index, call k uses index k: reproducible across objects
    first = [Smooth(Halfspace(), 2, 1.0).certify(torch.zeros(1, 1, 2), 10, 200, 0.001, 100) for _ in range(2)]
    again = Smooth(Halfspace(), 2, 1.0).certify(torch.zeros(1, 1, 2), 10, 200, 0.001, 100)
    assert first[0] == first[1] == again
    assert isinstance(Smooth(Halfspace(), 2, 1.0).predict(torch.zeros(1, 1, 2), 100, 0.001, 50), int)


def test_repeated_calls_draw_fresh_noise_and_an_index_pins_it():
    """Catches a Smooth that reuses one noise stream for every call (as a fixed seed per call would):
    successive calls without ``index`` must see different noisy inputs, calls with the same index the same."""
    recorder = Recorder()
    smooth = Smooth(recorder, num_classes=2, sigma=0.5)
    x = torch.zeros(1, 1, 2)
    for _ in range(2):
        smooth.predict(x, n=64, alpha=0.001, batch_size=64)
    first, second = recorder.seen
    assert first.shape == second.shape == (64, 1, 1, 2) and not torch.equal(first, second)
    recorder.seen.clear()
    for _ in range(2):
        smooth.predict(x, n=64, alpha=0.001, batch_size=64, index=5)
    assert torch.equal(*recorder.seen)
    recorder.seen.clear()
    smooth.certify(x, n0=16, n=64, alpha=0.001, batch_size=1000)
    selection, estimation = recorder.seen
    assert selection.shape[0] == 16 and estimation.shape[0] == 64
    assert not torch.equal(selection, estimation[:16])  # selection and estimation streams are independent


class WideMargin(nn.Module):
    """A conv net whose class is the sign of the mean pixel, with logits far from ties on every noisy
    sample (|mean| >= 0.3 while the noise moves the mean by < 0.1): any precision gives the same argmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)
        with torch.no_grad():
            self.conv.weight.fill_(1 / 9)
            self.conv.bias.zero_()
            self.head.weight.copy_(torch.tensor([[10.0, 0, 0, 0], [-10.0, 0, 0, 0], [0.0, 0, 0, 0]]))
            self.head.bias.zero_()

    def forward(self, x):
        return self.head(
            torch.relu(self.conv(x - 0.5)).mean(dim=(2, 3)) - torch.relu(self.conv(0.5 - x)).mean(dim=(2, 3))
        )


def test_bf16_and_channels_last_counts_equal_fp32_on_a_wide_margin_network():
    torch.manual_seed(0)
    xs = torch.cat([torch.full((3, 1, 16, 16), 0.85), torch.full((3, 1, 16, 16), 0.15)])
    model = WideMargin().eval()
    base = certify_batch(model, xs, range(6), spec(sigma=0.25, n=2000), num_classes=3)
    assert base.predict.tolist() == [0, 0, 0, 1, 1, 1]
    for settings in ({"precision": "bf16"}, {"precision": "bf16", "channels_last": True}):
        other = certify_batch(model, xs, range(6), spec(sigma=0.25, n=2000, **settings), num_classes=3)
        np.testing.assert_array_equal(other.counts, base.counts)
        np.testing.assert_array_equal(other.n_a0, base.n_a0)
    assert next(
        model.parameters()
    ).is_contiguous()  # channels_last converted a copy, not the caller's network


def test_bf16_really_runs_the_network_in_bfloat16():
    """Catches a precision key that is recorded but ignored: inside the network, conv outputs are bf16."""
    seen = []
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.LazyLinear(3)).eval()
    model(torch.rand(1, 1, 8, 8))
    model[0].register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    certify_batch(model, torch.rand(1, 1, 8, 8), [0], spec(n0=10, n=10, precision="bf16"), num_classes=3)
    assert set(seen) == {torch.bfloat16}
    seen.clear()
    certify_batch(model, torch.rand(1, 1, 8, 8), [0], spec(n0=10, n=10), num_classes=3)
    assert set(seen) == {torch.float32}


def test_precision_16_is_refused_on_cpu():
    with pytest.raises(ConfigError, match=r"^precision='16' is invalid: .*CUDA"):
        certify_batch(Halfspace(), torch.zeros(1, 1, 1, 2), [0], spec(precision="16"), num_classes=2)


def test_compile_failure_falls_back_to_eager_with_a_warning(monkeypatch):
    def broken(module, **kwargs):
        def run(x):
            raise RuntimeError("backend exploded")

        return run

    monkeypatch.setattr(torch, "compile", broken)
    xs = torch.full((2, 1, 1, 2), 0.3)
    with pytest.warns(RuntimeWarning, match="torch.compile failed .*backend exploded.*eager"):
        compiled = certify_batch(Halfspace(), xs, [0, 1], spec(compile=True), num_classes=2)
    eager = certify_batch(Halfspace(), xs, [0, 1], spec(), num_classes=2)
    np.testing.assert_array_equal(compiled.counts, eager.counts)


class NaNAfter(nn.Module):
    """Halfspace whose logits are NaN for inputs with x_1 > 3 (e.g. NaN weights on one path)."""

    def forward(self, x):
        logits = Halfspace()(x)
        return torch.where(x.flatten(1)[:, 1:2] > 3, torch.nan, logits)


def test_non_finite_logits_stop_certification_naming_the_input():
    """Catches certifying a diverged network: argmax of NaN logits is class 0, which looked like a constant
    classifier with a plausible radius."""
    xs = torch.zeros(3, 1, 1, 2)
    xs[2, 0, 0, 1] = 10.0  # every noisy sample of input idx 12 (and no other) has x_1 > 3
    with pytest.raises(
        NonFiniteLogitsError, match=r"non-finite logits .* of 100 noisy samples of input idx 12"
    ):
        certify_batch(NaNAfter(), xs, [10, 11, 12], spec(n0=100, n=100), num_classes=2)
    with pytest.raises(NonFiniteLogitsError, match="input idx 12"):
        predict_batch(NaNAfter(), xs, [10, 11, 12], spec(n0=None, mode="predict", n=50), num_classes=2)
    inf_model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    with torch.no_grad():
        inf_model[1].weight.fill_(float("inf"))
    with pytest.raises(NonFiniteLogitsError, match="input idx 0"):
        certify_batch(inf_model, torch.ones(1, 1, 1, 2), [0], spec(n0=10, n=10), num_classes=2)


def test_a_prepared_classifier_must_match_the_spec():
    prepared = prepare(Halfspace(), spec(precision="bf16"))
    with pytest.raises(ValueError, match="precision=bf16.*precision=32"):
        certify_batch(prepared, torch.zeros(1, 1, 1, 2), [0], spec(), num_classes=2)


def test_iss_sample_sizes_edge_cases():
    """k̂ = 0 abstains without estimating; k̂ <= k0 and k̂ = n are handled in both modes."""
    model, xs = Halfspace(), torch.zeros(3, 1, 1, 2)
    xs[0, 0, 0, 0], xs[1, 0, 0, 0], xs[2, 0, 0, 0] = 0.0, 3.0, -3.0  # pA 0.5, ~1, ~1
    # AD with a large decline: pilots near 1/2 get k̂ = 0, far ones a small k̂ (<= k0 here)
    iss = InputSpecific(decline="ad", max_decline=1.0, k0=400, granularity=10)
    result = certify_batch(
        model, xs, [0, 1, 2], spec(n0=None, n=1000, sampling="iss", sampler=iss), num_classes=2
    )
    assert result.n[0] == 0 and result.predict[0] == ABSTAIN and result.pa_hat[0] == 0.0
    assert 0 < result.n[1] <= 400 and result.samples[1] == 400 + result.n[1]
    assert (
        result.predict[1:].tolist() == [1, 0]
        and result.counts[1:].sum(axis=1).tolist() == result.n[1:].tolist()
    )
    with pytest.warns(UserWarning, match="not established"):
        reused = certify_batch(
            model,
            xs,
            [0, 1, 2],
            spec(
                n0=None,
                n=1000,
                sampling="iss",
                sampler=InputSpecific(
                    decline="ad", max_decline=1.0, k0=400, granularity=10, reuse_pilot=True
                ),
            ),
            num_classes=2,
        )
    assert reused.n.tolist() == [0, 400, 400] and reused.samples.tolist() == [400, 400, 400]
    # RD with a tiny decline: every size is the full budget n
    tight = InputSpecific(decline="rd", max_decline=1e-6, k0=10, granularity=10)
    full = certify_batch(
        model, xs[1:], [1, 2], spec(n0=None, n=1000, sampling="iss", sampler=tight), num_classes=2
    )
    assert full.n.tolist() == [1000, 1000] and full.samples.tolist() == [1010, 1010]


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"sigma": 0.0}, "sigma"),
        ({"sigma": float("nan")}, "sigma"),
        ({"alpha": 1.0}, "alpha"),
        ({"n0": 0}, "n0"),
        ({"n": 0}, "n"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_bad_arguments_name_the_key(kwargs, key):
    with pytest.raises(ConfigError, match=rf"^{key}="):
        spec(**kwargs)


def test_engine_refuses_a_spec_without_sigma():
    with pytest.raises(ConfigError, match=r"^sigma=None"):
        certify_batch(Halfspace(), torch.zeros(1, 1, 1, 2), [0], CertificationSpec(n0=1, n=1), num_classes=2)


def test_no_warning_in_the_default_path():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        certify_batch(Halfspace(), torch.zeros(1, 1, 1, 2), [0], spec(n0=5, n=5), num_classes=2)


def test_bf16_is_refused_on_a_gpu_without_bf16_units(monkeypatch):
    from rs_lightning.smoothing.precision import check_precision_supported

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: False)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (7, 5))
    with pytest.raises(ConfigError, match=r"^precision='bf16' is invalid: .*no bfloat16 units"):
        check_precision_supported("bf16", "cuda:0")
    check_precision_supported("16", "cuda:0")  # fp16 is fine there
    with pytest.raises(ConfigError, match=r"^precision='bf16' is invalid: precision must be 32 on mps"):
        check_precision_supported("bf16", "mps")


def test_smooth_with_channels_last_follows_the_models_current_weights():
    """Smooth keeps a reference to the model (Cohen's semantics): a converted channels_last copy must not
    go stale when the weights change between calls (e.g. certifying while training)."""
    model = nn.Sequential(nn.Conv2d(1, 2, 1), nn.Flatten(), nn.Linear(8, 2)).eval()
    with torch.no_grad():
        model[2].bias.copy_(torch.tensor([100.0, 0.0]))
    smooth = Smooth(model, num_classes=2, sigma=0.1, channels_last=True)
    x = torch.rand(1, 2, 2)
    assert smooth.predict(x, n=50, alpha=0.001, batch_size=50) == 0
    with torch.no_grad():
        model[2].bias.copy_(torch.tensor([0.0, 100.0]))
    assert smooth.predict(x, n=50, alpha=0.001, batch_size=50) == 1
    assert next(model.parameters()).is_contiguous()  # the caller's module keeps its layout


def test_a_prepared_classifier_must_match_the_specs_compile_key():
    prepared = prepare(Halfspace(), spec())
    with pytest.raises(ValueError, match="compile=False .*compile=True"):
        certify_batch(prepared, torch.zeros(1, 1, 1, 2), [0], spec(compile=True), num_classes=2)


def test_sampling_names_are_case_insensitive_and_iss_is_ignored_for_cohen():
    spec = CertificationSpec.from_dict({"sigma": 0.5, "sampling": "Cohen", "iss": {"decline": "ad"}})
    assert spec.sampling == "cohen" and spec.sampler == Cohen()
