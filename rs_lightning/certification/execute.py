"""Execute a :class:`~rs_lightning.certification.plan.CertificationPlan`: take the run folder, check that
its rows (if any) were made under the same settings, record the settings, certify this process's part, and
merge the parts and summarize once every input has its row.

Rows are appended one by one and flushed, so a killed run resumes from where it stopped: a rerun into the same
folder skips the indices already certified; a rerun with different statistical settings (sigma, n0, n, alpha,
seed, split, checkpoint, model) is refused, naming them, and so are rows whose protocol fingerprint is not
this run's (copied in from another run, with or without their settings.json).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rs_lightning.cpu_allocator import tune_cpu_allocator
from rs_lightning.runs import FolderLock, ResultFileError, check_resume, merge_parts

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
