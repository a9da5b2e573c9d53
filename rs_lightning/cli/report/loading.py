"""What the report's subcommands share: run folders loaded into labelled :class:`Run` objects, the output
folder, the Markdown and CSV writers, and logging a report to W&B."""

from __future__ import annotations

import csv
import datetime as dt
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rs_lightning.analysis.run_view import Run, assign_labels, load_runs
from rs_lightning.runs import ResultFileError
from rs_lightning.validation import ConfigError

from ..common import require_writable_dir

OUTPUTS = (
    "report.md",
    "table.csv",
    "dominance.csv",
    "verdicts.csv",
    "budget.csv",
    "budget_acr.png",
    "pa_ecdf_sigma*.png",
    "certified_accuracy_sigma*.png",
)
"""What a report writes, removed from its folder by ``--overwrite`` (nothing else there is touched)."""


def _checkpoint_method(path: str) -> str | None:
    """The training method recorded in a checkpoint file (read with weights_only=True); None if the file is
    gone or has none."""
    if not Path(path).is_file():
        return None
    from rs_lightning.models.checkpoint import CheckpointError, read_checkpoint

    try:
        return read_checkpoint(path)[1].training_method
    except (CheckpointError, KeyError, TypeError):
        return None


def method_name(run: Run) -> str | None:
    """The training method's class name: recorded in ``settings.json`` by certify.py, else from the run's
    checkpoint metadata (read with weights_only=True);
    "<format> (published)" for a published checkpoint (``checkpoint_format=``); the model's class for a
    checkpoint-free run (e.g. ConstantClassifier); None if unknown."""
    settings = run.settings
    checkpoint, model = settings.checkpoint, settings.model
    if settings.checkpoint_format:  # a published checkpoint: labelled by its repository's layout
        return f"{settings.checkpoint_format} (published)"
    if checkpoint is None:
        target = model.get("_target_") if isinstance(model, dict) else None
        return target.rsplit(".", 1)[-1] if target else None
    name = settings.method or _checkpoint_method(checkpoint)  # settings: an archived folder
    if name is None:
        return None
    pipeline = settings.pipeline
    return f"{name} ({pipeline.get('mode')})" if isinstance(pipeline, dict) else name


def load(paths: Sequence[str], sigma: float | None) -> list[Run]:
    """Runs under ``paths``, labelled "<method> σ=<sigma>"."""
    runs = load_runs(paths, sigma)
    for run in runs:
        run.method = method_name(run)
    assign_labels(runs)
    return runs


def prepare_out(out: str | None, overwrite: bool, suffix: str = "") -> Path:
    """The output folder: new or empty, or (``overwrite``) with the previous report's files removed; a
    ConfigError naming ``--out`` if it cannot be written."""
    path = Path(out or f"outputs/report/{dt.datetime.now():%Y-%m-%d/%H-%M-%S}{suffix}")
    try:
        if path.exists() and not path.is_dir():  # --overwrite replaces report files in a folder, not a file
            raise ResultFileError(
                f"--out {path} is an existing file, not a folder; choose a folder for --out (a new one, or "
                "one holding an earlier report)"
            )
        if path.exists() and any(path.iterdir()):
            if not overwrite:
                raise ResultFileError(
                    f"{path} already exists and is not empty; choose another --out or pass --overwrite"
                )
            for pattern in OUTPUTS:
                for old in path.glob(pattern):
                    old.unlink()
    except OSError as err:
        hint = (
            f"{path} cannot be read or cleared ({err.strerror or type(err).__name__}); choose another --out"
        )
        raise ConfigError("--out", str(path), "a folder you can write to", hint) from err
    return require_writable_dir(path, "--out")


def _cell(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return "nan" if np.isnan(value) else f"{value:.4f}"
    return str(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows])


def write_csv(path: Path, rows: list[dict], columns: Sequence[str] = ()) -> None:
    """Rows as CSV (None → empty); ``columns`` gives the header when there are no rows."""
    columns = list(dict.fromkeys([*columns, *(k for row in rows for k in row)]))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)


def log_to_wandb(folder: Path, table: list[dict], figures: list[Path]) -> None:
    """Log the table (``wandb.Table``) and the figures to a W&B run, offline unless WANDB_MODE is set."""
    import wandb

    columns = list(table[0])
    run = wandb.init(
        project=os.environ.get("WANDB_PROJECT", "rs-lightning"),
        job_type="report",
        dir=str(folder),
        mode=os.environ.get("WANDB_MODE", "offline"),
        reinit="create_new",  # a run left open by training in this process must not swallow the report
    )
    try:
        data = [["" if row.get(c) is None else row[c] for c in columns] for row in table]
        images = {f"report/{path.stem}": wandb.Image(str(path)) for path in figures}
        run.log({"report/table": wandb.Table(columns=columns, data=data), **images})
    finally:
        run.finish()
