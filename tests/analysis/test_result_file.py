"""certify.tsv: format, append-only writing, resume, repair of a killed last row."""

import numpy as np
import pytest
import torch

from rs_lightning.analysis import COLUMNS, ResultFileError, ResultWriter, read_results
from rs_lightning.analysis.results import PREDICT_COLUMNS, certify_rows, in_subset, predict_rows
from rs_lightning.smoothing import CertificationSpec, IssSettings, certify_batch, predict_batch


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
    }


def test_header_columns_and_full_precision(tmp_path):
    path = tmp_path / "certify.tsv"
    with ResultWriter(path) as writer:
        for i in range(3):
            writer.write(_row(i))
    lines = path.read_text().splitlines()
    assert lines[0].split("\t") == list(COLUMNS)
    assert lines[0].startswith("idx\tlabel\tpredict\tradius\tcorrect\ttime")  # Cohen's columns first
    assert lines[2].split("\t")[3] == "0.123456789"
    rows = read_results(path)
    assert rows["idx"].tolist() == [0, 1, 2] and rows["predict"].tolist() == [0, 1, -1]


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


def test_a_file_from_before_the_samples_column_resumes_in_its_own_format(tmp_path):
    path = tmp_path / "certify.tsv"
    old = [c for c in COLUMNS if c != "samples"]
    path.write_text(
        "\t".join(old)
        + "\n"
        + "\t".join(["0", "0", "0", "0.1", "1", "0.5", "9", "10", "0.6", "0.9", "5", "5"])
        + "\n"
    )
    with ResultWriter(path) as writer:
        assert writer.done == {0}
        writer.write(_row(1))
    rows = read_results(path)
    assert rows["idx"].tolist() == [0, 1] and "samples" not in rows


class _TwoClass(torch.nn.Module):
    def forward(self, x):
        z = x.flatten(1)[:, :1]
        return torch.cat([-z, z], dim=1)


def test_rows_are_built_from_engine_results():
    """One builder for certify.py and the callback: labels decide ``correct``; ISS rows carry their own n."""
    xs = torch.tensor([[2.0, 0.0], [-2.0, 0.0], [0.0, 0.0]]).view(3, 1, 1, 2)
    spec = CertificationSpec(sigma=0.5, n0=20, n=200, alpha=0.001, batch_size=100)
    rows = certify_rows(certify_batch(_TwoClass(), xs, [4, 5, 6], spec, num_classes=2), [1, 1, 0], 0.25)
    assert [r["idx"] for r in rows] == [4, 5, 6] and set(rows[0]) == set(COLUMNS)
    assert [r["correct"] for r in rows] == [1, 0, 0] and rows[0]["predict"] == 1 and rows[2]["predict"] == -1
    assert rows[0]["samples"] == 220 and rows[0]["pA_hat"] == rows[0]["nA"] / 200
    iss = CertificationSpec(
        sigma=0.5, n=200, alpha=0.001, sampling="iss", iss=IssSettings(max_decline=0.5, k0=20, granularity=10)
    )
    iss_rows = certify_rows(certify_batch(_TwoClass(), xs, [4, 5, 6], iss, num_classes=2), [1, 1, 0], 0.25)
    assert (
        all(r["samples"] == 20 + r["n"] for r in iss_rows)
        and iss_rows[2]["n"] == 0
        and iss_rows[2]["pA_hat"] == 0
    )
    predict = CertificationSpec(sigma=0.5, mode="predict", n=100, alpha=0.001)
    prows = predict_rows(predict_batch(_TwoClass(), xs, [4, 5, 6], predict, num_classes=2), [1, 1, 0], 0.1)
    assert set(prows[0]) == set(PREDICT_COLUMNS) and [r["correct"] for r in prows] == [1, 0, 0]
    assert prows[0]["nA"] + prows[0]["nB"] == 100 and prows[2]["predict"] == -1


def test_in_subset_selects_the_recorded_subset():
    idx = np.arange(30)
    assert idx[in_subset(idx, {"skip": 5, "start": 2, "max": 20})].tolist() == [2, 7, 12, 17]
    assert in_subset(idx, None).all() and in_subset(idx, {"skip": 1, "start": 0, "max": None}).all()
