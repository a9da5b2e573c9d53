"""Shared fixtures (helpers live in ``rs_testing.py``, importable from every test folder).

``make test`` runs the suite on pytest-xdist workers (one process each, ``-n``): each worker has its own
session, so the expensive session fixtures below compute their files once for all workers, under a lock in
the folder the workers share (the pattern of pytest-xdist's docs, "Making session-scoped fixtures execute
only once"), and each worker's torch takes its share of the cores instead of all of them."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from filelock import FileLock
from rs_testing import SMALL, certify_config, train_config

DIGITS_OVERRIDES = [
    "callbacks.certification.every_n_epochs=10",
    "callbacks.certification.num_inputs=24",
    "callbacks.certification.n=200",
    "callbacks.certification.batch_size=300",
]


def pytest_configure(config) -> None:
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:  # N workers x all cores' threads would oversubscribe the machine N times
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


@pytest.fixture(autouse=True)
def fresh_wandb_settings():
    """W&B reads its process-wide settings once, at the first ``wandb.init`` of the process; a later
    ``WANDB_MODE=dryrun`` (what Lightning's offline ``WandbLogger`` sets) is then ignored and W&B asks for an
    API key. Reset them after each test, so a test's W&B mode does not depend on which tests its worker
    happened to run before it."""
    yield
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()


def once_for_all_workers(tmp_path_factory, name: str, produce: Callable[[Path], dict]) -> tuple[Path, dict]:
    """``(folder, result)``: ``produce(folder)`` run by the first worker to get here, its JSON-able result
    stored beside the folder; every other worker waits for it and reads it back."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the run's base folder, above each worker's own
    folder, record = shared / name, shared / f"{name}.json"
    with FileLock(str(record) + ".lock"):
        if not record.is_file():
            folder.mkdir()
            record.write_text(json.dumps(produce(folder)))
        return folder, json.loads(record.read_text())


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory) -> dict:
    """The demo's training (`make demo`: gaussian, sigma 0.25, digits defaults), callback every 10 epochs."""
    from rs_lightning.cli.train import train

    out, result = once_for_all_workers(
        tmp_path_factory, "digits_run", lambda out: train(train_config(out, DIGITS_OVERRIDES))
    )
    return {"out": out, **result}


@pytest.fixture(scope="session")
def digits_reference(trained_digits, tmp_path_factory) -> tuple:
    """``(folder, summary)`` of one single-process certify.py run of the digits checkpoint with
    :data:`rs_testing.SMALL`: what sharded, distributed and resumed runs must reproduce row for row."""
    from rs_lightning.cli.certify import certify

    checkpoint = trained_digits["checkpoint"]
    return once_for_all_workers(
        tmp_path_factory, "single", lambda out: certify(certify_config(out, checkpoint, SMALL))
    )
