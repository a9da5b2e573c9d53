"""A certification run is a plan executed once; a single process, ``shard=i/k`` parts and DDP ranks differ
only in the :class:`Part` each certifies. These tests build plans in Python, no config."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from rs_lightning.certification import CertificationPlan, OneProcess, Part, execute
from rs_lightning.runs import RunRecord, read_results, result_table
from rs_lightning.smoothing import CertificationSpec

INDICES = list(range(0, 30, 3))


def _plan(out, mode="certify", part=Part(0, 1)) -> CertificationPlan:  # noqa: B008 (frozen)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 3)).eval()
    data = [(torch.randn(2, 4), i % 3) for i in range(30)]
    n0 = 20 if mode == "certify" else None
    spec = CertificationSpec(sigma=0.5, n0=n0, n=200, alpha=0.01, seed=1, batch_size=256, mode=mode)
    record = RunRecord(
        **spec.as_dict(), subset={"skip": 3, "start": 0, "max": None, "num_inputs": len(INDICES)}, dim=8
    )
    return CertificationPlan(
        spec, model, 3, data, INDICES, record, out, OneProcess(torch.device("cpu"), part)
    )


def test_part_takes_every_index_once_and_names_its_file(tmp_path):
    parts = [Part(i, 3, own_file=True) for i in range(3)]
    taken = sorted(i for p in parts for i in p.inputs(INDICES))
    assert taken == INDICES
    assert (
        Part().inputs(INDICES) == INDICES
        and Part().file(tmp_path / "certify.tsv") == tmp_path / "certify.tsv"
    )
    assert parts[1].file(tmp_path / "predict.tsv").name == "predict.shard-1-of-3.tsv"


@pytest.mark.parametrize("mode", ["certify", "predict"])
def test_parts_give_the_single_process_rows(tmp_path, mode):
    """Catches a part that skips or repeats an input, writes to the wrong file, or draws noise that depends
    on the split: the rows of two parts, merged by the part that finishes last, equal the single run's."""
    whole = execute(_plan(tmp_path / "whole", mode))
    first = execute(_plan(tmp_path / "parts", mode, Part(0, 2, own_file=True)))
    assert first == {"merged": False, "missing": 5, "num_inputs": 10}
    assert (tmp_path / "parts" / f"{mode}.shard-0-of-2.tsv").is_file()
    merged = execute(_plan(tmp_path / "parts", mode, Part(1, 2, own_file=True)))
    table = result_table(mode)
    a, b = table.read(tmp_path / "whole"), table.read(tmp_path / "parts")
    assert list(a["idx"]) == INDICES and not list((tmp_path / "parts").glob("*.shard-*"))
    for column in table.columns:
        if column != "time":
            np.testing.assert_array_equal(a[column], b[column], err_msg=column)
    assert {k: v for k, v in merged.items() if k != "throughput"} == {
        k: v for k, v in whole.items() if k != "throughput"
    }


def test_the_mode_chooses_the_table(tmp_path):
    execute(_plan(tmp_path, "predict"))
    assert (tmp_path / "predict.tsv").is_file() and not (tmp_path / "certify.tsv").exists()
    assert set(read_results(tmp_path / "predict.tsv", result_table("predict").required)) == set(
        result_table("predict").columns
    )
    assert result_table(None) is result_table("certify")


def test_a_record_that_does_not_describe_the_plan_is_refused(tmp_path):
    """settings.json is what a resume, a merge and the report trust; rows come from the plan's spec and
    indices. Catches a Python-API plan whose record says n=200 while its rows are drawn with n=400."""
    plan = _plan(tmp_path)
    with pytest.raises(ValueError, match="record.spec"):
        dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, n=400))
    with pytest.raises(ValueError, match="record.subset"):
        dataclasses.replace(plan, indices=INDICES[:-1])
    with pytest.raises(ValueError, match="processes"):
        execute(dataclasses.replace(plan, processes=None))
    assert not (tmp_path / "settings.json").exists()


def test_the_certification_package_reads_no_config():
    """The plan is executed without reaching back to the CLI: rs_lightning.certification imports neither
    rs_lightning.cli nor Hydra/OmegaConf (checked in a fresh interpreter)."""
    code = (
        "import sys, rs_lightning.certification, rs_lightning.certification.ranks\n"
        "bad = [m for m in sys.modules if m.startswith(('rs_lightning.cli', 'hydra', 'omegaconf'))]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
