"""certify.tsv: format, append-only writing, resume, repair of a killed last row, the protocol fingerprint."""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from rs_lightning.analysis.run_view import load_run
from rs_lightning.runs import (
    ADDED_LATER,
    COLUMNS,
    FINGERPRINT,
    IDENTITY_KEYS,
    PREDICT_COLUMNS,
    ResultFileError,
    ResultWriter,
    RunRecord,
    certify_rows,
    check_resume,
    file_formats,
    in_subset,
    merge_parts,
    predict_rows,
    read_results,
    run_columns,
    shard_table,
)
from rs_lightning.smoothing import CertificationSpec, InputSpecific, certify_batch, predict_batch
from rs_lightning.smoothing.certificate import Certificate
from rs_lightning.smoothing.spec import PROTOCOL_KEYS
from rs_lightning.smoothing.stats import clopper_pearson_lower
from rs_lightning.validation import ConfigError

FP = "0123456789abcdef"  # a protocol fingerprint
ARCHIVED = Path(__file__).parents[2] / "docs" / "results" / "mnist_reproduction" / "sigma025_n10000" / "runs"


def _row(i):
    return {
        "idx": i,
        "label": i % 3,
        "predict": -1 if i == 2 else i % 3,
        "radius": 0.123456789 * i,
        "correct": int(i != 2),
        "time": 0.5,
        "nA": 90 + i,
        "n": 100,
        "pA_lower": 0.7,
        "pA_hat": 0.9,
        "n0": 10,
        "nA0": 9,
        "samples": 110,
        "flagged": 0,
    }


def test_header_columns_and_full_precision(tmp_path):
    path = tmp_path / "certify.tsv"
    with ResultWriter(path, protocol=FP) as writer:
        for i in range(3):
            writer.write(_row(i))
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS) and COLUMNS[-1] == FINGERPRINT == "protocol"
    assert lines[0].startswith("idx\tlabel\tpredict\tradius\tcorrect\ttime")  # Cohen's columns first
    assert lines[2].split("\t")[3] == "0.123456789"
    rows = read_results(path)
    assert rows["idx"].tolist() == [0, 1, 2] and rows["predict"].tolist() == [0, 1, -1]
    assert rows[FINGERPRINT].tolist() == [FP] * 3


def test_a_writer_without_a_fingerprint_writes_no_fingerprint_column(tmp_path):
    """Rows made outside a run (no record, so no fingerprint) are written in the format before the column,
    never with an empty or made-up fingerprint."""
    with ResultWriter(tmp_path / "certify.tsv") as writer:
        writer.write(_row(0) | {FINGERPRINT: FP})
    assert FINGERPRINT not in read_results(tmp_path / "certify.tsv")


def test_resume_skips_written_rows_and_refuses_duplicates(tmp_path):
    path = tmp_path / "certify.tsv"
    with ResultWriter(path) as writer:
        writer.write(_row(0))
        writer.write(_row(1))
    with ResultWriter(path) as writer:
        assert writer.done == {0, 1}
        with pytest.raises(ResultFileError, match="idx 1 is already"):
            writer.write(_row(1))
        writer.write(_row(2))
    assert read_results(path)["idx"].tolist() == [0, 1, 2]


@pytest.mark.parametrize("tail", ["5\t2\t2\t0.3", "5\t2\t2\t0.3\t1\t0.5\t95\t100\t0.7\t0.9\t10\t9"])
def test_incomplete_last_row_is_dropped_and_redone(tmp_path, tail):
    path = tmp_path / "certify.tsv"
    with ResultWriter(path) as writer:
        writer.write(_row(0))
    with path.open("a") as f:
        f.write(tail)  # killed mid-write: no newline
    with pytest.warns(UserWarning, match="incomplete last row"), ResultWriter(path) as writer:
        assert writer.done == {0}
        writer.write(_row(5))
    rows = read_results(path)
    assert rows["idx"].tolist() == [0, 5] and rows["nA"].tolist() == [90, 95]


def test_corrupt_complete_last_line_is_redone_but_corrupt_middle_line_is_an_error(tmp_path):
    path = tmp_path / "certify.tsv"
    with ResultWriter(path) as writer:
        writer.write(_row(0))
    with path.open("a") as f:
        f.write("1\t1\tgarbage\n")
    with pytest.warns(UserWarning), ResultWriter(path) as writer:
        assert writer.done == {0}
        writer.write(_row(1))
        writer.write(_row(2))
    text = path.read_text().splitlines()
    text.insert(2, "junk")
    path.write_text("\n".join(text) + "\n")
    with pytest.raises(ResultFileError, match="malformed"):
        ResultWriter(path)


def test_other_header_is_refused(tmp_path):
    path = tmp_path / "certify.tsv"
    path.write_text("idx\tlabel\tpredict\tradius\tcorrect\ttime\n0\t1\t1\t0.5\t1\t0:00:01\n")
    with pytest.raises(ResultFileError, match="another output_dir"):
        ResultWriter(path)


def test_reading_a_cohen_file_and_missing_files(tmp_path):
    path = tmp_path / "cohen.tsv"
    path.write_text(
        "idx\tlabel\tpredict\tradius\tcorrect\ttime\n0\t1\t1\t0.5\t1\t0:00:01.250000\n20\t3\t-1\t0.0\t0\t1.1\n"
    )
    rows = read_results(path)
    assert rows["radius"].tolist() == [0.5, 0.0] and "nA" not in rows
    assert rows["time"].tolist() == [1.25, 1.1]
    with pytest.raises(ResultFileError, match="no result file"):
        read_results(tmp_path / "missing.tsv")
    (tmp_path / "bad.tsv").write_text("a\tb\n")
    with pytest.raises(ResultFileError, match="lacks the columns"):
        read_results(tmp_path / "bad.tsv")


def test_the_chronology_of_added_columns_gives_every_earlier_format():
    """One list, ADDED_LATER, gives the headers of every earlier version, newest first."""
    assert ADDED_LATER == ("samples", "protocol", "flagged")
    drops = ((), ("flagged",), ("protocol", "flagged"), ADDED_LATER)
    without = [tuple(c for c in COLUMNS if c not in drop) for drop in drops]
    assert file_formats(COLUMNS) == without
    assert file_formats(PREDICT_COLUMNS) == [
        tuple(c for c in PREDICT_COLUMNS if c not in drop) for drop in drops[:3]
    ]
    assert COLUMNS[-2:] == PREDICT_COLUMNS[-2:] == ("flagged", "protocol")


@pytest.mark.parametrize(
    "dropped",
    [("flagged",), ("protocol", "flagged"), ADDED_LATER],
    ids=["no-flagged", "no-protocol", "no-samples"],
)
def test_a_file_from_before_a_column_resumes_in_its_own_format(tmp_path, dropped):
    """Catches: a file of an earlier version (without ``protocol``, or without ``samples`` too) refused, or
    appended to with more fields than its header."""
    path = tmp_path / "certify.tsv"
    old = [c for c in COLUMNS if c not in dropped]
    path.write_text("\t".join(old) + "\n" + "\t".join(_format_row(_row(0) | {"protocol": FP}, old)) + "\n")
    with ResultWriter(path, protocol=FP) as writer:
        assert writer.done == {0} and writer.columns == tuple(old)
        writer.write(_row(1))
    rows = read_results(path)
    assert rows["idx"].tolist() == [0, 1] and list(rows) == old
    assert run_columns(path, COLUMNS) == tuple(old)  # a new part of this run keeps the run's format


def test_a_file_without_the_flagged_column_refuses_a_row_with_flagged_draws(tmp_path):
    """Catches: flagged draws (votes for no class under lattice noise) silently lost when a run resumes in a
    file written before the column existed; rows without flagged draws still resume there."""
    path = tmp_path / "certify.tsv"
    old = [c for c in COLUMNS if c != "flagged"]
    path.write_text("\t".join(old) + "\n" + "\t".join(_format_row(_row(0) | {"protocol": FP}, old)) + "\n")
    with ResultWriter(path, protocol=FP) as writer:
        writer.write(_row(1))
        with pytest.raises(ResultFileError, match="idx 2 has 3 flagged draws.*another output_dir"):
            writer.write(_row(2) | {"flagged": 3})
    assert read_results(path)["idx"].tolist() == [0, 1]


def _format_row(row, columns):
    return [str(row[c]) for c in columns]


def test_a_torn_fingerprint_is_an_incomplete_row(tmp_path):
    """Catches: a last row cut inside its fingerprint (all fields present, the last one short) kept as a
    complete row of another protocol."""
    path = tmp_path / "certify.tsv"
    with ResultWriter(path, protocol=FP) as writer:
        writer.write(_row(0))
    line = path.read_text().splitlines()[1].replace("\t0\t", "\t1\t", 1)  # idx 1
    path.write_text(path.read_text() + line[:-3] + "\n")  # cut in the fingerprint, newline written
    with pytest.warns(UserWarning, match="incomplete last row"), ResultWriter(path, protocol=FP) as writer:
        assert writer.done == {0}


class _TwoClass(torch.nn.Module):
    def forward(self, x):
        z = x.flatten(1)[:, :1]
        return torch.cat([-z, z], dim=1)


def test_rows_are_built_from_engine_results():
    """One builder for certify.py and the callback: labels decide ``correct``; ISS rows carry their own n."""
    xs = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0]]).view(3, 1, 1, 2)
    spec = CertificationSpec(sigma=0.5, n0=20, n=200, alpha=0.001, batch_size=100)
    rows = certify_rows(certify_batch(_TwoClass(), xs, [4, 5, 6], spec, num_classes=2), [1, 1, 0], 0.25)
    assert [r["idx"] for r in rows] == [4, 5, 6] and set(rows[0]) == set(COLUMNS) - {FINGERPRINT}
    assert [r["correct"] for r in rows] == [1, 0, 0] and rows[0]["predict"] == 1 and rows[2]["predict"] == -1
    assert rows[0]["samples"] == 220 and rows[0]["pA_hat"] == rows[0]["nA"] / 200
    iss = CertificationSpec(
        sigma=0.5,
        n=200,
        alpha=0.001,
        sampling="iss",
        sampler=InputSpecific(max_decline=0.5, k0=20, granularity=10),
    )
    iss_rows = certify_rows(certify_batch(_TwoClass(), xs, [4, 5, 6], iss, num_classes=2), [1, 1, 0], 0.25)
    assert (
        all(r["samples"] == 20 + r["n"] for r in iss_rows)
        and iss_rows[2]["n"] == 0
        and iss_rows[2]["pA_hat"] == 0
    )
    predict = CertificationSpec(sigma=0.5, mode="predict", n=100, alpha=0.001)
    prows = predict_rows(predict_batch(_TwoClass(), xs, [4, 5, 6], predict, num_classes=2), [1, 1, 0], 0.1)
    assert set(prows[0]) == set(PREDICT_COLUMNS) - {FINGERPRINT}
    assert [r["correct"] for r in prows] == [1, 0, 0]
    assert prows[0]["nA"] + prows[0]["nB"] == 100 and prows[2]["predict"] == -1


def test_in_subset_selects_the_recorded_subset():
    idx = np.arange(30)
    assert idx[in_subset(idx, {"skip": 5, "start": 2, "max": 20})].tolist() == [2, 7, 12, 17]
    assert in_subset(idx, None).all() and in_subset(idx, {"skip": 1, "start": 0, "max": None}).all()


# ---------------------------------------------------------------------------------- the protocol fingerprint
def _record(**changes) -> RunRecord:
    spec = CertificationSpec(**{"sigma": 0.25, "n": 1000, "alpha": 0.001} | changes.pop("spec", {}))
    values = {"checkpoint_sha256": "ab" * 32, "model": {"_target_": "LeNet"}, "data": {"name": "digits"}}
    values |= {"device": "cpu", "subset": {"skip": 1, "start": 0, "max": 10, "num_inputs": 10}}
    return RunRecord(**spec.as_dict() | values | changes)


def test_the_fingerprint_covers_the_identity_a_resume_must_match():
    """Catches: a fingerprint blind to a key a resume compares (seed, precision, sampler, checkpoint content,
    sigma, device), or one that moves with what a resume may change (max, batch size) or with the stored
    form (tuples read back as lists)."""
    record = _record()
    assert set(record.identity()) == set(PROTOCOL_KEYS) | set(IDENTITY_KEYS)
    fingerprint = record.fingerprint()
    assert len(fingerprint) == 16 and not fingerprint.strip("0123456789abcdef")
    assert RunRecord.from_dict(json.loads(json.dumps(record.to_dict()))).fingerprint() == fingerprint
    same = [
        dataclasses.replace(record, subset={"skip": 1, "start": 0, "max": 20, "num_inputs": 20}),
        dataclasses.replace(record, batch_size=7, devices=["cpu", "cpu"], checkpoint="/elsewhere.ckpt"),
    ]
    assert {r.fingerprint() for r in same} == {fingerprint}
    iss = {"sampling": "iss", "sampler": InputSpecific(max_decline=0.5, k0=40)}
    others = [
        _record(spec={"seed": 7}),
        _record(spec={"precision": "bf16"}),
        _record(spec=iss),
        _record(checkpoint_sha256="cd" * 32),
        _record(spec={"sigma": 0.5}),
        _record(device="cuda"),
        _record(model={"_target_": "ResNet"}),
    ]
    assert len({r.fingerprint() for r in [record, *others]}) == len(others) + 1


def test_merge_refuses_parts_of_different_fingerprints(tmp_path):
    """Catches: a merge that joins a part certified under another protocol (rows copied in) into one
    certify.tsv."""
    table = tmp_path / "certify.tsv"
    for shard, fingerprint in ((0, FP), (1, "fedcba9876543210")):
        with ResultWriter(shard_table(table, (shard, 2)), protocol=fingerprint) as writer:
            writer.write(_row(shard))
    with pytest.raises(ResultFileError, match=rf"different protocols .*{FP} in .*fedcba9876543210 in") as e:
        merge_parts(table, [0, 1])
    assert len(str(e.value).splitlines()) == 1 and not table.exists()


def test_resume_refuses_rows_of_another_fingerprint(tmp_path):
    """Catches: rows of another protocol accepted because settings.json is missing (the rows of another seed
    record nothing a resume could tell apart) or because it matches (the rows were copied in without
    theirs)."""
    record, other = _record(), _record(spec={"seed": 7})
    table = tmp_path / "certify.tsv"
    lower = float(clopper_pearson_lower(990, 1000, 0.001))  # a row as record's protocol would make it too
    row = _row(0) | {"label": 0, "predict": 0, "nA": 990, "n": 1000, "n0": 100, "pA_lower": lower}
    with ResultWriter(table, protocol=other.fingerprint()) as writer:
        writer.write(row | {"radius": Certificate().radius(lower, 0.25)})
    check_resume(tmp_path, other, table)  # its own rows resume
    refused = rf"certify.tsv holds rows of another protocol \(fingerprint {other.fingerprint()}\)"
    with pytest.raises(ConfigError, match=rf"{refused} and no settings.json.*{record.fingerprint()}") as e:
        check_resume(tmp_path, record, table)
    assert str(e.value).startswith("output_dir=") and "choose another output_dir" in str(e.value).lower()
    record.write(tmp_path)
    with pytest.raises(ConfigError, match=rf"{refused} though settings.json matches"):
        check_resume(tmp_path, record, table)


def test_an_archived_row_file_without_the_column_loads_and_resumes(tmp_path):
    """Catches: the runs archived under docs/results/ (rows without ``protocol``) refused by the report or a
    resume, or resumed with a column their header lacks; without settings.json their rows are still checked
    for what they record (n, n0, alpha, sigma)."""
    folder = tmp_path / "cohen"
    shutil.copytree(ARCHIVED / "cohen", folder)
    table = folder / "certify.tsv"
    run = load_run(folder)
    assert FINGERPRINT not in run.rows and run.num_inputs == 200
    record = RunRecord.read(folder)
    check_resume(folder, record, table)
    rows = read_results(table)
    with ResultWriter(table, COLUMNS, record.fingerprint()) as writer:
        assert writer.columns == file_formats(COLUMNS)[2] and len(writer.done) == 200
        writer.write({c: v[0] for c, v in rows.items()} | {"idx": 10000})  # idx 0's row as a new input
    assert load_run(folder).num_inputs == 201
    (folder / "settings.json").unlink()
    (folder / "summary.json").unlink()
    check_resume(folder, record, table)
    with pytest.raises(ConfigError, match=r"certify.tsv holds rows with n=10000, n0=100 .* and no settings"):
        check_resume(folder, dataclasses.replace(record, n=2000), table)
