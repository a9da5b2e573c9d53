"""Shared fixtures (helpers live in ``rs_testing.py``, importable from every test folder)."""

from __future__ import annotations

import pytest
from rs_testing import SMALL, certify_config, train_config


@pytest.fixture(scope="session")
def trained_digits(tmp_path_factory) -> dict:
    """The demo's training (`make demo`: gaussian, sigma 0.25, digits defaults), callback every 10 epochs."""
    from rs_lightning.cli.train import train

    out = tmp_path_factory.mktemp("digits_run")
    cfg = train_config(
        out,
        [
            "callbacks.certification.every_n_epochs=10",
            "callbacks.certification.num_inputs=24",
            "callbacks.certification.n=200",
            "callbacks.certification.batch_size=300",
        ],
    )
    result = train(cfg)
    return {"cfg": cfg, "out": out, **result}


@pytest.fixture(scope="session")
def digits_reference(trained_digits, tmp_path_factory) -> tuple:
    """``(folder, summary)`` of one single-process certify.py run of the digits checkpoint with
    :data:`rs_testing.SMALL`: what sharded, distributed and resumed runs must reproduce row for row."""
    from rs_lightning.cli.certify import certify

    out = tmp_path_factory.mktemp("single")
    return out, certify(certify_config(out, trained_digits["checkpoint"], SMALL))
