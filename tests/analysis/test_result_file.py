"""certify.tsv: format, append-only writing, resume, repair of a killed last row."""

import pytest

from rs_lightning.analysis import COLUMNS, ResultFileError, ResultWriter, read_results


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
