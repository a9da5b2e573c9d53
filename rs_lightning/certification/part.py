"""One process's share of a run: certify the inputs of its :class:`~rs_lightning.certification.plan.Part` that
no part file holds yet, appending their rows to the part's file, each with the run's protocol fingerprint. The
only writer loop, whether the process is the only one, a ``shard=i/k`` part or a DDP rank."""

from __future__ import annotations

import torch
from tqdm import tqdm

from rs_lightning.runs import ResultWriter, done_indices, run_columns
from rs_lightning.smoothing import run_dataset

from .plan import CertificationPlan, Part


def certify_part(
    plan: CertificationPlan,
    part: Part,
    device: torch.device,
    *,
    label: str | None = None,
    show_progress: bool = True,
    progress_scale: int = 1,
) -> None:
    """Certify (or PREDICT, as ``plan.spec.mode`` says) the inputs of ``part`` still missing from the run
    folder. ``label``: the progress bar's (default: the mode and the part); ``progress_scale``: what one
    input counts in it (the ranks of a DDP run, whose rank 0 shows the whole run's progress)."""
    table = plan.table
    path = plan.table_path
    mine = part.inputs(plan.indices)
    columns = run_columns(path, table.columns)  # a run begun before a column existed keeps its format
    # opening repairs a killed run's last line; every row carries the run's protocol fingerprint
    with ResultWriter(part.file(path), columns, plan.record.fingerprint()) as writer:
        done = done_indices(path)
        todo = [i for i in mine if i not in done]
        bar = tqdm(
            total=len(mine) * progress_scale,
            initial=(len(mine) - len(todo)) * progress_scale,
            unit="input",
            desc=label or plan.spec.mode + (f" {part.index}/{part.count}" if part.own_file else ""),
            disable=not show_progress,
            dynamic_ncols=True,
            mininterval=1.0,
        )
        with bar:  # closed (its line ended) also when a signal stops the run, before the run says so
            for result, labels, seconds in run_dataset(
                plan.model, plan.dataset, todo, plan.spec, num_classes=plan.num_classes, device=device
            ):
                for row in table.make_rows(result, labels, seconds):
                    writer.write(row)
                bar.update(min(len(labels) * progress_scale, bar.total - bar.n))
