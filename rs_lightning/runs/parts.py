"""The parts of a run: ``shard=i/k`` runs write ``certify.shard-<i>-of-<k>.tsv`` each, and the run that finds
every index present merges the parts into ``certify.tsv`` (sorted by idx, written atomically). Rows do not
depend on the process that made them (noise seeded per input), so the merged file equals a single-process
run's except for the ``time`` column.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .format import FINGERPRINT, ResultFileError, complete_rows, file_formats


def shard_table(table: str | os.PathLike, shard: tuple[int, int]) -> Path:
    """``certify.tsv`` → ``certify.shard-<i>-of-<k>.tsv`` (the file part i of k writes)."""
    table = Path(table)
    return table.with_name(f"{table.stem}.shard-{shard[0]}-of-{shard[1]}{table.suffix}")


def part_tables(table: str | os.PathLike) -> list[Path]:
    """The table and every shard file of it that exist: all the rows of a run folder."""
    table = Path(table)
    shards = sorted(table.parent.glob(f"{table.stem}.shard-*-of-*{table.suffix}"))
    return ([table] if table.is_file() else []) + shards


def run_columns(table: str | os.PathLike, columns: tuple[str, ...]) -> tuple[str, ...]:
    """The columns of a new part file of a run whose table has ``columns``: the format of the parts already
    written, if they have an earlier one (a run begun by an earlier version continues in its format, so its
    parts merge), else ``columns``."""
    for path in part_tables(table):
        with path.open(encoding="utf-8") as f:
            first = f.readline()
        header = tuple(first.rstrip("\n").split("\t"))
        if first.endswith("\n") and header in file_formats(columns):
            return header
    return columns


def _rows_by_idx(path: Path) -> tuple[str, dict[int, str], set[str]]:
    """Header line, ``{idx: line}`` of a result file's complete rows (see :func:`complete_rows`) and the
    fingerprints they carry (none without the column)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    by_idx, found = {}, set()
    for _, line, row in complete_rows(path, lines):
        by_idx[row["idx"]] = line
        if FINGERPRINT in row:
            found.add(row[FINGERPRINT])
    return lines[0], by_idx, found


def done_indices(table: str | os.PathLike) -> set[int]:
    """Indices with a complete row in the table or any of its shard files."""
    done: set[int] = set()
    for path in part_tables(table):
        if path.stat().st_size:
            done |= set(_rows_by_idx(path)[1])
    return done


def merge_parts(table: str | os.PathLike, wanted: list[int], protocol: str | None = None) -> list[int]:
    """Merge the table and its shard files into ``table`` (sorted by idx, atomically; the shard files are
    then removed) once together they hold every ``wanted`` index; returns the indices still missing (then
    nothing is changed). Two parts holding one index are refused, naming the indices, and so are rows of
    different protocol fingerprints, or of another than ``protocol`` (the run's, from its settings.json)."""
    table = Path(table)
    with (table.parent / ".merge.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # one merger at a time; released when the file closes
        return _merge_locked(table, wanted, protocol)


def _merge_locked(table: Path, wanted: list[int], protocol: str | None) -> list[int]:
    parts = [p for p in part_tables(table) if p.stat().st_size]
    header, merged, owner, overlap, protocols = None, {}, {}, {}, {}
    for path in parts:
        head, rows, found = _rows_by_idx(path)
        if header is not None and head != header:
            raise ResultFileError(f"{path} has the header {head!r}, other parts {header!r}")
        header = head
        for fingerprint in sorted(found):
            protocols.setdefault(fingerprint, path.name)
        for idx, line in rows.items():
            if idx in merged:
                overlap.setdefault((owner[idx].name, path.name), []).append(idx)
            merged[idx], owner[idx] = line, path
    if len(protocols) > 1:
        detail = ", ".join(f"{fingerprint} in {name}" for fingerprint, name in protocols.items())
        raise ResultFileError(
            f"parts of {table} hold rows of different protocols (fingerprints {detail}): rows of another run "
            "were copied in; remove them, or certify into another output_dir"
        )
    foreign = [(f, name) for f, name in protocols.items() if protocol is not None and f != protocol]
    if foreign:
        raise ResultFileError(
            f"{foreign[0][1]} holds rows of another protocol (fingerprint {foreign[0][0]}) than its run's "
            f"settings.json ({protocol}): rows of another run were copied in; remove them, or certify into "
            "another output_dir"
        )
    if overlap:
        detail = "; ".join(f"{a} and {b}: idx {sorted(v)[:8]}" for (a, b), v in overlap.items())
        raise ResultFileError(f"parts of {table} overlap ({detail}); remove the duplicate rows of one part")
    missing = sorted(set(wanted) - set(merged))
    if missing or header is None or parts == [table]:
        return missing
    tmp = table.with_name(f".{table.name}.{os.getpid()}.tmp")
    tmp.write_text(header + "\n" + "".join(merged[i] + "\n" for i in sorted(merged)), encoding="utf-8")
    os.replace(tmp, table)
    for path in parts:
        if path != table:
            path.unlink()
    return []
