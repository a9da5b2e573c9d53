"""The ACR-gaming data curation as a component (Sun et al., ICML 2025, §3.2): ACRCuration on a plain Gaussian
training module, without the ACRGaming method: discard, reweight, its checkpoint state and resume."""

import collections
import functools

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from scipy.stats import norm
from torch import nn

from rs_lightning.data.arrays import ArrayDataset
from rs_lightning.data.base import RSDataModule
from rs_lightning.data.curation import STATE_KEY, ACRCuration, radius_weights
from rs_lightning.methods import GaussianAugmentation
from rs_lightning.methods.acr_gaming import ACRGaming

SIGMA = 0.25


class Constants(RSDataModule):
    """Training image i is the constant 0 or 1 on 1x8x8 (``right`` = the level-1 ones), label 1 for all."""

    name = "constants"

    def __init__(self, n: int = 40, seed: int = 0, **kwargs):
        super().__init__(batch_size=8, **kwargs)
        self.levels = np.random.default_rng(seed).integers(0, 2, n)
        self.right = set(np.flatnonzero(self.levels == 1).tolist())
        self.num_classes, self.class_names, self.input_shape = 2, ["0", "1"], (1, 8, 8)

    def _load(self):
        images = np.broadcast_to(255 * self.levels[:, None, None, None], (len(self.levels), 1, 8, 8))
        data = ArrayDataset(images.astype(np.uint8), np.ones(len(self.levels), dtype=np.int64))
        return {"train": data, "test": data}


def mean_threshold() -> nn.Module:
    """Logits 20·(∓(mean pixel − 0.5)): class 1 iff the mean pixel > 0.5. The noise mean over 64 pixels has
    std σ/8, 16 std from the margin, so p̂ is exactly 1 on level-1 images and 0 on level-0 ones."""
    layer = nn.Linear(64, 2)
    with torch.no_grad():
        layer.weight.copy_(torch.stack([-torch.ones(64), torch.ones(64)]) * 20 / 64)
        layer.bias.copy_(torch.tensor([10.0, -10.0]))
    return nn.Sequential(nn.Flatten(), layer)


class IndexRecorder(GaussianAugmentation):
    """Gaussian training that records the dataset indices each epoch trains on."""

    needs_sample_index = True

    def __init__(self):
        super().__init__(
            model=mean_threshold(), sigma=SIGMA, optimizer=functools.partial(torch.optim.SGD, lr=0.0)
        )
        self.seen = collections.defaultdict(list)

    def training_loss(self, x, y, index=None):
        self.seen[self.current_epoch] += index.tolist()
        return super().training_loss(x, y)


def _fit(curation, epochs, ckpt_path=None, **trainer_kwargs):
    module, data = IndexRecorder(), Constants()
    data.train_with_index = True
    kwargs = {
        **dict(
            logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
        ),
        **dict(num_sanity_val_steps=0, limit_val_batches=0, accelerator="cpu"),
        **trainer_kwargs,
    }
    trainer = pl.Trainer(max_epochs=epochs, callbacks=[curation], **kwargs)
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, data, trainer


def test_discard_keeps_exactly_the_inputs_with_p_hat_at_least_tau_and_reweights_them():
    curation = ACRCuration(ds_epoch=1, discard_samples=20, reweight_samples=16, reweight_every=1)
    module, data, trainer = _fit(curation, epochs=3)
    assert set(curation.sampler.subset.tolist()) == data.right
    assert sorted(module.seen[0]) == list(range(40)), "before E_ds: a permutation of all inputs"
    assert all(set(module.seen[e]) <= data.right and len(module.seen[e]) == 40 for e in (1, 2))
    np.testing.assert_allclose(curation.sampler.weights.numpy(), norm.ppf(0.1 ** (1 / 16)), rtol=1e-12)
    kept, discarded = (trainer.callback_metrics[f"train/{k}_inputs"] for k in ("kept", "discarded"))
    assert kept == len(data.right) and discarded == 40 - len(data.right)
    assert data.train_sampler is None, "the sampler is uninstalled after the fit"


def test_each_re_estimate_replaces_the_weights_the_sampler_draws_with():
    """R = 2 from E_ds = 1 with p̂ that changes at every estimate (hits by epoch, stand-in for the model):
    the weights in force at the start of epochs 1-5 are those of the latest estimate (1, 1, 3, 3, 5).

    Catches a re-estimation that runs but is not applied after the first time (``_reweight`` returning early
    once weights exist, or ``set_weights`` only when none are set): the test above counts calls, and with
    the same p̂ every epoch stale weights equal fresh ones."""
    curation = ACRCuration(ds_epoch=1, discard_hard=False, reweight_samples=16, reweight_every=2)
    low = np.arange(40) < 20
    hits_at = {1: np.where(low, 12, 16), 3: np.where(low, 16, 12), 5: np.full(40, 14)}
    curation._hits = lambda indices, num_samples, epoch: hits_at[epoch][indices]
    in_force = {}
    prepare = curation.prepare_epoch

    def recording_prepare(epoch):
        prepare(epoch)
        if curation.sampler.weights is not None:
            in_force[epoch] = curation.sampler.weights.numpy().copy()

    curation.prepare_epoch = recording_prepare
    _fit(curation, epochs=6)
    assert sorted(in_force) == [1, 2, 3, 4, 5]
    for epoch, estimate in ((1, 1), (2, 1), (3, 3), (4, 3), (5, 5)):
        expected = radius_weights(hits_at[estimate] / 16, 16)
        np.testing.assert_allclose(in_force[epoch], expected, rtol=1e-12, err_msg=f"epoch {epoch}")


def test_threshold_is_inclusive_with_a_p_hat_file(tmp_path):
    p_hat = np.arange(40) / 39
    np.save(tmp_path / "p.npy", p_hat)
    tau = float(p_hat[13])
    curation = ACRCuration(
        ds_epoch=0, discard_pa_file=str(tmp_path / "p.npy"), discard_threshold=tau, reweight=False
    )
    _fit(curation, epochs=1)
    assert curation.sampler.subset.tolist() == list(range(13, 40))
    assert np.all(radius_weights(p_hat[13:], 16) > 0)


@pytest.mark.filterwarnings("ignore:Be aware that when using `ckpt_path`")
def test_state_round_trips_through_a_weights_only_checkpoint_and_resume_does_not_re_estimate(tmp_path):
    first = ACRCuration(ds_epoch=0, discard_samples=20, reweight_samples=16)
    _fit(first, epochs=1, enable_checkpointing=True, default_root_dir=tmp_path)
    path = next((tmp_path / "checkpoints").glob("*.ckpt"))
    state = torch.load(path, weights_only=True)[STATE_KEY]
    assert state["discarded"] and set(state["subset"].tolist()) == Constants().right
    assert torch.equal(state["weights"], first.sampler.weights)

    second = ACRCuration(ds_epoch=0, discard_samples=20, reweight_samples=16)  # no sampler before the fit
    second._discard = second._reweight = lambda epoch: pytest.fail("re-estimated after resume")
    module, data, _ = _fit(second, epochs=2, default_root_dir=tmp_path, ckpt_path=path)
    assert list(module.seen) == [1] and set(module.seen[1]) <= data.right
    assert torch.equal(second.sampler.subset, first.sampler.subset) and second._discarded
    assert torch.equal(second.sampler.weights, first.sampler.weights)

    saved, restored = {}, ACRCuration()
    second.on_save_checkpoint(None, None, saved)
    restored.sampler = type(second.sampler)(40)
    restored.on_load_checkpoint(None, None, saved)  # applied at once when the sampler exists
    assert restored._discarded and torch.equal(restored.sampler.subset, second.sampler.subset)
    assert torch.equal(restored.sampler.weights, second.sampler.weights)


def test_the_method_returns_its_curation_only_when_it_curates():
    def method(**switches):
        return ACRGaming(model=mean_threshold(), sigma=SIGMA, optimizer=torch.optim.SGD, **switches)

    full = method()
    assert full.configure_callbacks() == [full.curation] and full.curation.active
    assert method(discard_hard=False, reweight=False).configure_callbacks() == []
    assert ACRCuration(discard_hard=False, reweight=True).active


def test_reweighting_with_a_period_above_one_re_estimates_at_e_ds_and_every_r_epochs_after_only():
    """``reweight_every`` R = 2 from E_ds = 1 over epochs 0..5: p̂ is re-estimated (and the sampler's weights
    replaced) at epochs 1, 3 and 5, never at 0, 2 or 4.

    Exists to catch the one-line mutation that re-estimates only the first time, e.g. the condition of
    ``ACRCuration.prepare_epoch`` reduced to ``if self.reweight and self.sampler.weights is None:`` (the other
    tests use R = 1 or stop before a second re-estimation)."""
    curation = ACRCuration(ds_epoch=1, discard_hard=False, reweight_samples=16, reweight_every=2)
    estimated = []
    reweight = curation._reweight

    def recording_reweight(epoch):
        estimated.append(epoch)
        reweight(epoch)

    curation._reweight = recording_reweight
    module, data, _ = _fit(curation, epochs=6)
    assert estimated == [1, 3, 5]
    # the estimates drive the sampler: right/wrong inputs get the weight of p̂ = 1 / p̂ = 0 clipped to 0.75
    weights = curation.sampler.weights.numpy()
    right = np.array(sorted(data.right))
    wrong = np.setdiff1d(np.arange(40), right)
    np.testing.assert_allclose(weights[right], norm.ppf(0.1 ** (1 / 16)), rtol=1e-12)
    np.testing.assert_allclose(weights[wrong], radius_weights(0.0, 16), rtol=1e-12)
    assert sorted(module.seen[0]) == list(range(40)), "before E_ds: a permutation of all inputs"
