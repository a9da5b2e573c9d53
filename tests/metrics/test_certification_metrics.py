"""torchmetrics certification metrics vs. references written here from their definitions, also under DDP.

References (numpy, independent of ``rs_lightning.analysis``):
ACR = mean_i radius_i * 1[correct_i] (Zhai et al. 2020); certified accuracy at r = mean_i 1[correct_i and
radius_i >= r] over all inputs, abstains included (Cohen et al. 2019); pA ECDF y(x) = mean_i 1[pa_i >= x]
(Sun et al. 2025). Repeated indices (DistributedSampler padding) count once, first occurrence wins.
"""

from __future__ import annotations

import os
import time
import traceback
from datetime import timedelta

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rs_lightning.metrics import AverageCertifiedRadius, CertifiedAccuracy, PAEcdf, PAEstimates

RADII = (0.0, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0)
GRID = tuple(np.round(np.linspace(0.5, 1.0, 51), 3))
N_SAMPLES = 1000  # pa = nA / N_SAMPLES: exact multiples of 1/1000, so comparisons with GRID are exact


# ---------------------------------------------------------------------------------------------------------
# Data and references
# ---------------------------------------------------------------------------------------------------------


def make_records(num: int, seed: int) -> dict[str, np.ndarray]:
    """Random per-input records as certification produces them (abstain => radius 0, wrong, pa 0).

    Radii hit some grid values exactly, to exercise ``>=``; pa hits ECDF grid points exactly.
    """
    rng = np.random.default_rng(seed)
    index = rng.permutation(10 * num)[:num].astype(np.int64)
    abstain = rng.random(num) < 0.2
    correct = (rng.random(num) < 0.7) & ~abstain
    radius = np.where(abstain, 0.0, rng.uniform(0.0, 1.5, num))
    exact = rng.random(num) < 0.2
    radius[exact & ~abstain] = rng.choice(RADII[:-1], (exact & ~abstain).sum())
    pa = np.where(correct, rng.integers(400, N_SAMPLES + 1, num) / N_SAMPLES, 0.0)
    return {"index": index, "correct": correct, "radius": radius, "pa": pa}


def ref_acr(rec) -> float:
    return float(np.mean(rec["radius"] * rec["correct"])) if rec["index"].size else 0.0


def ref_certified_accuracy(rec, radii) -> np.ndarray:
    if not rec["index"].size:
        return np.zeros(len(radii))
    return np.array([np.mean(rec["correct"] & (rec["radius"] >= r)) for r in radii])


def ref_ecdf(rec, grid) -> np.ndarray:
    if not rec["index"].size:
        return np.zeros(len(grid))
    return np.array([np.mean(rec["pa"] >= x) for x in grid])


def first_occurrence(rec) -> dict[str, np.ndarray]:
    """Keep the first record of every index (written independently of the package's argsort trick)."""
    seen: set[int] = set()
    keep = []
    for k, i in enumerate(rec["index"].tolist()):
        if i not in seen:
            seen.add(i)
            keep.append(k)
    return {key: value[keep] for key, value in rec.items()}


def all_metrics() -> dict[str, PAEstimates]:
    return {
        "pa": PAEstimates(),
        "acr": AverageCertifiedRadius(),
        "cert": CertifiedAccuracy(RADII),
        "ecdf": PAEcdf(GRID),
    }


def feed(metrics, rec, chunk_sizes) -> None:
    """update() every metric with consecutive chunks of ``rec`` (sizes cycle through ``chunk_sizes``)."""
    start, k, total = 0, 0, rec["index"].size
    while start < total:
        stop = min(total, start + chunk_sizes[k % len(chunk_sizes)])
        args = [torch.as_tensor(rec[key][start:stop]) for key in ("index", "correct", "radius", "pa")]
        for metric in metrics.values():
            metric.update(*args)
        start, k = stop, k + 1


def computed(metrics) -> dict[str, np.ndarray]:
    index, pa = metrics["pa"].compute()
    return {
        "index": index.cpu().numpy(),
        "pa": pa.cpu().numpy(),
        "acr": metrics["acr"].compute().cpu().numpy(),
        "cert": metrics["cert"].compute().cpu().numpy(),
        "ecdf": metrics["ecdf"].compute().cpu().numpy(),
    }


def assert_matches_reference(out, rec) -> None:
    """``out`` (from :func:`computed`) equals the references on the deduplicated records ``rec``."""
    order = np.argsort(rec["index"])
    np.testing.assert_array_equal(out["index"], rec["index"][order])
    np.testing.assert_allclose(out["pa"], rec["pa"][order], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["acr"], ref_acr(rec), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["cert"], ref_certified_accuracy(rec, RADII), rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["ecdf"], ref_ecdf(rec, GRID), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# Single process
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_metrics_match_definitions_over_several_updates(seed):
    rec = make_records(97, seed)
    metrics = all_metrics()
    feed(metrics, rec, chunk_sizes=(10, 1, 33, 7))
    assert_matches_reference(computed(metrics), rec)


def test_reference_sanity_on_hand_computed_example():
    # 4 inputs: correct with radius 0.5; correct with radius 0 (exactly at r = 0); wrong; abstain.
    rec = {
        "index": np.array([3, 1, 2, 0]),
        "correct": np.array([True, True, False, False]),
        "radius": np.array([0.5, 0.0, 0.9, 0.0]),
        "pa": np.array([0.9, 0.5, 0.0, 0.0]),
    }
    metrics = all_metrics()
    feed(metrics, rec, chunk_sizes=(3,))
    out = computed(metrics)
    assert out["acr"] == pytest.approx(0.5 / 4)
    # radius 0.9 of the wrong input never counts; ">=" at r = 0 and r = 0.5.
    np.testing.assert_allclose(out["cert"], [0.5, 0.25, 0.25, 0.25, 0.0, 0.0, 0.0])
    assert out["ecdf"][0] == pytest.approx(0.5)  # y(0.5): pa 0.9 and 0.5
    assert out["ecdf"][GRID.index(0.9)] == pytest.approx(0.25)
    assert out["ecdf"][-1] == 0.0
    assert_matches_reference(out, rec)


def test_certified_accuracy_at_zero_is_clean_accuracy_and_ecdf_at_half():
    rec = make_records(200, 5)
    rec["pa"] = np.where(rec["correct"], np.maximum(rec["pa"], 0.5), 0.0)
    metrics = all_metrics()
    feed(metrics, rec, chunk_sizes=(64,))
    out = computed(metrics)
    assert out["cert"][0] == pytest.approx(rec["correct"].mean())
    assert out["ecdf"][0] == pytest.approx(rec["correct"].mean())


def test_duplicate_indices_counted_once_first_occurrence_wins():
    rec = make_records(40, 3)
    # Re-send 10 indices with *different* values (as a conflicting duplicate) and 5 with identical values.
    rng = np.random.default_rng(4)
    conflicting = make_records(10, 99)
    conflicting["index"] = rng.choice(rec["index"], 10, replace=False)
    conflicting["correct"] = ~conflicting["correct"]
    identical = {key: value[:5].copy() for key, value in rec.items()}
    union = {key: np.concatenate([rec[key], conflicting[key], identical[key]]) for key in rec}
    metrics = all_metrics()
    feed(metrics, union, chunk_sizes=(13, 4))
    out = computed(metrics)
    assert out["index"].size == 40
    assert_matches_reference(out, rec)
    assert_matches_reference(out, first_occurrence(union))


def test_duplicate_within_one_update():
    rec = {
        "index": np.array([7, 7, 8]),
        "correct": np.array([True, False, True]),
        "radius": np.array([1.0, 0.0, 0.25]),
        "pa": np.array([0.99, 0.0, 0.6]),
    }
    metrics = all_metrics()
    feed(metrics, rec, chunk_sizes=(3,))
    out = computed(metrics)
    assert out["acr"] == pytest.approx((1.0 + 0.25) / 2)
    assert_matches_reference(out, first_occurrence(rec))


@pytest.mark.filterwarnings("ignore:The ``compute`` method of metric")
def test_empty_metric_computes_zeros():
    out = computed(all_metrics())
    assert out["index"].size == 0 and out["pa"].size == 0
    assert float(out["acr"]) == 0.0
    np.testing.assert_array_equal(out["cert"], np.zeros(len(RADII)))
    np.testing.assert_array_equal(out["ecdf"], np.zeros(len(GRID)))
    for value in out.values():
        assert np.all(np.isfinite(value))


def test_empty_updates_are_harmless():
    rec = make_records(12, 8)
    metrics = all_metrics()
    empty = [torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.bool)] + [torch.zeros(0)] * 2
    for metric in metrics.values():
        metric.update(*empty)
    feed(metrics, rec, chunk_sizes=(5,))
    assert_matches_reference(computed(metrics), rec)


@pytest.mark.parametrize("bad", ["index", "correct", "radius", "pa"])
@pytest.mark.parametrize("cls", [PAEstimates, AverageCertifiedRadius, CertifiedAccuracy, PAEcdf])
def test_mismatched_lengths_raise(cls, bad):
    metric = cls(RADII) if cls is CertifiedAccuracy else cls()
    args = {
        "index": torch.arange(4),
        "correct": torch.ones(4, dtype=torch.bool),
        "radius": torch.ones(4),
        "pa": torch.ones(4),
    }
    args[bad] = args[bad][:3]
    with pytest.raises(ValueError, match="equal length"):
        metric.update(*args.values())


def test_reset_clears_records():
    metrics = all_metrics()
    feed(metrics, make_records(20, 6), chunk_sizes=(7,))
    rec = make_records(15, 7)
    for metric in metrics.values():
        metric.reset()
    feed(metrics, rec, chunk_sizes=(4,))
    assert_matches_reference(computed(metrics), rec)


# ---------------------------------------------------------------------------------------------------------
# DDP: two gloo processes on CPU
# ---------------------------------------------------------------------------------------------------------

WORLD_SIZE = 2
DDP_NUM = 23  # odd: DistributedSampler pads to 24 by repeating dataset position 0 on the last rank
RANK_CHUNKS = {0: (5,), 1: (3, 1)}  # uneven number of update() calls per rank (3 vs 5)
EMPTY_RANK_NUM = 5
DDP_TIMEOUT_S = 90


def padded_shards(num: int, world_size: int) -> list[list[int]]:
    """Dataset positions per rank, exactly as torch's DistributedSampler(shuffle=False, drop_last=False)."""
    total = -(-num // world_size) * world_size
    positions = list(range(num))
    positions += positions[: total - num]
    return [positions[rank:total:world_size] for rank in range(world_size)]


def _run_scenario(name: str, rank: int, rec, positions, chunk_sizes, out_dir: str) -> None:
    try:
        shard = {key: value[positions] for key, value in rec.items()}
        metrics = all_metrics()
        feed(metrics, shard, chunk_sizes=chunk_sizes)
        result = computed(metrics)
        # A second compute (cached) and the local state afterwards (unsynced again) must stay consistent.
        result["acr_again"] = metrics["acr"].compute().cpu().numpy()
        result["local_count"] = np.array(sum(t.numel() for t in metrics["acr"].index))
        np.savez(os.path.join(out_dir, f"{name}_rank{rank}.npz"), **result)
    except Exception:  # recorded for the test to report; the next scenario still runs
        with open(os.path.join(out_dir, f"{name}_rank{rank}.err"), "w") as handle:
            handle.write(traceback.format_exc())


def _ddp_worker(rank: int, world_size: int, store: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world_size, timeout=timedelta(seconds=30)
    )
    try:
        rec = make_records(DDP_NUM, seed=11)
        positions = padded_shards(DDP_NUM, world_size)[rank]
        _run_scenario("padded", rank, rec, positions, RANK_CHUNKS[rank], out_dir)
        dist.barrier()
        # The certification callback shards with indices[rank::world_size]: a rank can receive nothing.
        rec = make_records(EMPTY_RANK_NUM, seed=12)
        positions = list(range(EMPTY_RANK_NUM)) if rank == 0 else []
        _run_scenario("empty_rank", rank, rec, positions, (2,), out_dir)
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """Run both DDP scenarios in one 2-process gloo group (spawning costs seconds); return the folder."""
    folder = tmp_path_factory.mktemp("ddp")
    context = mp.spawn(
        _ddp_worker, args=(WORLD_SIZE, str(folder / "store"), str(folder)), nprocs=WORLD_SIZE, join=False
    )
    deadline = time.monotonic() + DDP_TIMEOUT_S
    try:
        while not context.join(timeout=1):
            if time.monotonic() > deadline:
                for process in context.processes:
                    process.terminate()
                break
    except Exception as error:  # a worker failed: the tests below report its traceback
        (folder / "spawn.err").write_text(str(error))
    return folder


def load_rank_results(folder, name: str) -> list[dict[str, np.ndarray]]:
    results = []
    for rank in range(WORLD_SIZE):
        path = folder / f"{name}_rank{rank}.npz"
        if not path.exists():
            errors = [p.read_text() for p in sorted(folder.glob(f"{name}_rank*.err"))]
            errors += [p.read_text() for p in folder.glob("spawn.err")]
            pytest.fail(f"DDP scenario {name!r}: rank {rank} produced no result:\n" + "\n".join(errors))
        with np.load(path) as data:
            results.append(dict(data))
    return results


def assert_ranks_equal(results, expected, shards) -> None:
    for rank, got in enumerate(results):
        for key, value in expected.items():
            np.testing.assert_allclose(got[key], value, rtol=0, atol=1e-12, err_msg=f"rank {rank}: {key}")
        np.testing.assert_allclose(got["acr_again"], expected["acr"], rtol=0, atol=1e-12)
        assert int(got["local_count"]) == len(shards[rank]), "compute must leave the local state unsynced"


def test_ddp_padded_sampler_matches_single_process(ddp_run):
    rec = make_records(DDP_NUM, seed=11)
    shards = padded_shards(DDP_NUM, WORLD_SIZE)
    assert sum(len(s) for s in shards) == DDP_NUM + 1 and shards[-1][-1] == 0  # one padded repeat
    # Single process, fed the undeduplicated union of the shards (padding included).
    union = {key: value[[p for s in shards for p in s]] for key, value in rec.items()}
    single = all_metrics()
    feed(single, union, chunk_sizes=(DDP_NUM + 1,))
    expected = computed(single)
    assert_matches_reference(expected, rec)
    assert_ranks_equal(load_rank_results(ddp_run, "padded"), expected, shards)


def test_ddp_rank_without_inputs(ddp_run):
    """A rank that never called update() must still sync: for an empty list state torchmetrics gathers a
    float32 placeholder, which clashes with the int64 ``index`` / bool ``correct`` of the other ranks (gloo
    aborts the process); the metric has to supply empty tensors of the right dtypes itself."""
    rec = make_records(EMPTY_RANK_NUM, seed=12)
    single = all_metrics()
    feed(single, rec, chunk_sizes=(EMPTY_RANK_NUM,))
    expected = computed(single)
    assert_matches_reference(expected, rec)
    # SIGABRT in a worker here = dtype clash of the placeholder torchmetrics gathers for an empty state.
    assert_ranks_equal(load_rank_results(ddp_run, "empty_rank"), expected, [range(EMPTY_RANK_NUM), []])
