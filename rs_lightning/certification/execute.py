"""Execute a :class:`~rs_lightning.certification.plan.CertificationPlan`: take the run folder, check that
its rows (if any) were made under the same settings, record the settings, certify this process's part, and
merge the parts and summarize once every input has its row.

Rows are appended one by one and flushed, so a killed run resumes from where it stopped: a rerun into the same
folder skips the indices already certified; a rerun with different statistical settings (sigma, n0, n, alpha,
seed, split, checkpoint, model) is refused, naming them, and so are rows whose protocol fingerprint is not
this run's (copied in from another run, with or without their settings.json).
"""

from __future__ import annotations

import warnings
from contextlib import nullcontext
from pathlib import Path

import numpy as np

from rs_lightning.analysis.results import (
    FolderLock,
    ResultFileError,
    RunRecord,
    fingerprints,
    merge_parts,
    part_tables,
    read_results,
    settings_mismatch,
)
from rs_lightning.cpu_allocator import tune_cpu_allocator
from rs_lightning.smoothing import CertificationSpec
from rs_lightning.validation import ConfigError

from .part import certify_part
from .plan import CertificationPlan, OneProcess, Ranks
from .summary import finish_run


def execute(plan: CertificationPlan) -> dict:
    """Run ``plan`` in this process; returns the run's summary dict (also written to ``summary.json``), or,
    when other parts are still to finish, how many inputs they miss (``{"merged": False, ...}``), or ``{}``
    in a DDP rank that leaves the merge to rank 0."""
    processes = plan.processes
    if not isinstance(processes, OneProcess | Ranks):
        raise ValueError(f"plan.processes={processes!r}: pass OneProcess(device, part) or Ranks(trainer)")
    plan.out.mkdir(parents=True, exist_ok=True)
    if isinstance(processes, OneProcess):
        plan.model.to(processes.device)  # in place: the plan's model is the one certified
        if processes.device.type == "cpu":
            tune_cpu_allocator()
    with _folder_lock(plan.out, processes):
        check_resume(plan.out, plan.record, plan.table_path)
        plan.record.write(plan.out)
        if isinstance(processes, Ranks):
            from .ranks import certify_on_ranks  # Lightning's strategies load only for a DDP run

            if not certify_on_ranks(plan, processes):
                return {}  # another rank merges
        else:
            certify_part(plan, processes.part, processes.device)
        missing = merge_parts(plan.table_path, plan.indices, plan.record.fingerprint())
    if missing and isinstance(processes, Ranks):  # every rank has finished: rows were lost, not pending
        raise ResultFileError(
            f"{plan.out}: after every rank finished, {len(missing)} of {len(plan.indices)} inputs have no "
            f"row (idx {missing[:10]}); do the ranks share this output_dir (one filesystem on every node)? "
            "Rerun to certify them"
        )
    if missing:
        part = processes.part
        print(
            f"{plan.spec.mode} part {part.index}/{part.count}: {len(part.inputs(plan.indices))} inputs done; "
            f"{len(missing)} of the run's {len(plan.indices)} are in other parts still to finish (the last "
            f"part to finish merges them into {plan.table.name}, or run: python -m rs_lightning.cli.report "
            f"merge {plan.out})"
        )
        return {"merged": False, "missing": len(missing), "num_inputs": len(plan.indices)}
    return finish_run(plan.out, plan.record).to_dict()


def _folder_lock(out: Path, processes: OneProcess | Ranks):
    """The run folder's lock: exclusive for a single process, shared by ``shard=i/k`` parts and by ranks a
    cluster started side by side (SLURM, torchrun); a rank that runs certify.py again works under its
    launcher's lock (and holds the rank lock)."""
    if isinstance(processes, OneProcess):
        return FolderLock(out, shared=processes.part.own_file)
    if processes.launcher is not None:
        return nullcontext()
    external = processes.trainer.strategy.cluster_environment.creates_processes_externally
    return FolderLock(out, shared=external, check_ranks=not external)


def check_resume(out: Path, settings: RunRecord, table_path: Path) -> None:
    """Refuse a folder whose rows were made under other statistical settings: those in its ``settings.json``
    (named in the message); without it, what the rows record of them (:func:`_check_rows_match`, naming it);
    and in either case rows whose protocol fingerprint is not this run's (rows copied in from another run,
    differing in any setting). Rows without the column (earlier versions') have only the first two checks."""
    old = RunRecord.read(out)
    if old is not None:
        before, now = old.identity(), settings.identity()
        changed = {k: (before[k], now[k]) for k in now if before[k] != now[k]}
        if changed:
            detail = ", ".join(f"{k}: {a!r} there, {b!r} now" for k, (a, b) in changed.items())
            raise ConfigError(
                "output_dir", str(out), "a folder certified with the same settings",
                f"It holds results for other settings ({detail}); choose another output_dir so no rows are "
                "mixed",
            )  # fmt: skip
    fingerprint = settings.fingerprint()
    for path in part_tables(table_path):
        try:
            with warnings.catch_warnings():  # a killed run's last row: its writer warns when it redoes it
                warnings.simplefilter("ignore")
                rows = read_results(path, ("idx",)) if path.stat().st_size else {}
        except ResultFileError:
            continue  # a malformed or foreign file: the writer and the merge refuse it
        if old is None and rows:
            _check_rows_match(table_path, path, rows, settings.spec, settings.dim)
        other = [f for f in fingerprints(rows) or () if f != fingerprint]
        if other:
            where = "and no settings.json" if old is None else "though settings.json matches (copied rows)"
            found = f"rows of another protocol (fingerprint {other[0]})"
            _refuse_rows(table_path, path, found, f"fingerprint {fingerprint}", where)


def _check_rows_match(
    table_path: Path, path: Path, rows: dict, spec: CertificationSpec, dim: int | None
) -> None:
    """Without ``settings.json``, the rows of ``path`` must be what this run would write: their
    ``n``/``n0`` columns fit its n and n0, and the settings each row records implicitly agree with its own —
    ``alpha`` through ``pA_lower`` = the Clopper–Pearson bound of ``nA`` of ``n`` (PREDICT: through
    abstaining exactly where ``pvalue > alpha``), and sigma/norm through ``radius`` = scale·Φ⁻¹(pA_lower)."""
    required = ("n",) if spec.mode == "predict" else ("n", "n0")
    if not set(required) <= rows.keys():
        return  # an old file without these columns: the writer checks its header
    n_a0 = rows.get("nA0")
    if spec.mode == "certify":
        bad = ~spec.sampler.rows_fit(spec, rows["n"], rows["n0"], n_a0, dim)
        expected = spec.sampler.expected(spec)
    else:
        bad, expected = rows["n"] != spec.n, f"n={spec.n}"
    if bad.any():
        j = int(np.argmax(bad))
        found = f"n={int(rows['n'][j])}" + (f", n0={int(rows['n0'][j])}" if "n0" in rows else "")
        _refuse_rows(table_path, path, f"rows with {found} (idx {int(rows['idx'][j])})", expected)
    levels = spec.row_levels(rows["n"], n_a0, dim)  # each row's own level (sequential: by its look)
    mismatch = settings_mismatch(rows, spec.mode, levels, spec.sigma, spec.norm, dim, spec.noise)
    if mismatch is not None:
        _refuse_rows(table_path, path, *mismatch)


def _refuse_rows(
    table_path: Path, path: Path, found: str, now: str, context: str = "and no settings.json"
) -> None:
    raise ConfigError(
        "output_dir", str(table_path.parent), "a folder certified with the same settings",
        f"{path.name} holds {found} {context}; this run has {now}. Choose another output_dir so no rows are "
        "mixed",
    )  # fmt: skip
