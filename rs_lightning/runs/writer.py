"""Writing a run folder's files: result rows appended and flushed one by one, resumable after a crash (a
last line that a killed process left incomplete is dropped and redone); JSON records replaced atomically.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

from .format import COLUMNS, FINGERPRINT, FLAGGED, ResultFileError, complete_rows, file_formats, format_value
from .locks import try_flock


class ResultWriter:
    """Appends rows to a TSV; on open, validates the header and repairs an incomplete last line.
    ``protocol``: the run's fingerprint (:meth:`RunRecord.fingerprint`), written in every row; without one
    (rows made outside a run) the file has no :data:`FINGERPRINT` column. A file of an earlier format
    (:func:`file_formats`) is appended to in its own format."""

    def __init__(
        self, path: str | os.PathLike, columns: tuple[str, ...] = COLUMNS, protocol: str | None = None
    ):
        self.path = Path(path)
        self.columns = columns if protocol is not None else tuple(c for c in columns if c != FINGERPRINT)
        self.protocol = protocol
        self.done: set[int] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = try_flock(self.path)
        if self._file is None:
            raise ResultFileError(
                f"{self.path} is being written by another running process (certify.py into the same "
                "output_dir); wait for it, give each job its own part with shard=i/k, or use another "
                "output_dir"
            ) from None
        self._recover()
        if self.path.stat().st_size == 0:
            self._file.write("\t".join(self.columns) + "\n")
            self._file.flush()

    def _recover(self) -> None:
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
            return
        text = self.path.read_text(encoding="utf-8")
        header_line = "\t".join(self.columns)
        if "\n" not in text and header_line.startswith(text):
            self.path.write_text("")  # killed while writing the header
            return
        lines = text.split("\n")
        header = lines[0].split("\t")
        if tuple(header) in file_formats(self.columns):
            self.columns = tuple(header)  # the file's own format (an earlier version's, or this one)
        else:
            raise ResultFileError(
                f"{self.path} has the header {header}, expected {list(self.columns)}; "
                "write to another output_dir instead of mixing formats"
            )
        good_end = len(lines[0].encode("utf-8")) + 1
        for _, line, row in complete_rows(self.path, lines):
            self.done.add(row["idx"])
            good_end += len(line.encode("utf-8")) + 1
        if good_end < len(text.encode("utf-8")):
            warnings.warn(
                f"{self.path}: dropping an incomplete last row; it will be certified again", stacklevel=3
            )
            with self.path.open("r+b") as f:
                f.truncate(good_end)

    def write(self, row: dict) -> None:
        """Append one row (keys = columns) and flush it to the OS."""
        if int(row["idx"]) in self.done:
            raise ResultFileError(f"idx {row['idx']} is already in {self.path}")
        if row.get(FLAGGED, 0) and FLAGGED not in self.columns:
            raise ResultFileError(
                f"idx {row['idx']} has {row[FLAGGED]} flagged draws (votes for no class), but {self.path} "
                f"was written before the {FLAGGED} column existed and cannot record them; certify into "
                "another output_dir"
            )
        row = {**row, FINGERPRINT: self.protocol}
        self._file.write("\t".join(format_value(c, row[c]) for c in self.columns) + "\n")
        self._file.flush()
        self.done.add(int(row["idx"]))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_json_atomic(path: str | os.PathLike, data) -> None:
    """Write JSON to a temporary file and rename it over ``path``: readers never see a partial file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def read_json(path: str | os.PathLike) -> dict:
    """A JSON file written by certify.py; a ResultFileError (one line) if it is empty or corrupt."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ResultFileError(
            f"{path} is unreadable ({err}); restore it or choose another output_dir"
        ) from err
