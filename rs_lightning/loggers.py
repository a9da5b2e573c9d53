"""Lightning's CSV logger, made safe for resumed runs.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when it starts, so resuming a run into its own
folder erased every earlier row. :class:`ResumableCSVLogger` keeps the file: rows logged before the
checkpoint being resumed (``step`` below the checkpoint's count of trained batches) stay, rows logged after
it (the interrupted epoch, which runs again) are dropped, and the resumed run appends.
"""

from __future__ import annotations

import csv
import os

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter


def trained_batches(checkpoint: dict) -> int:
    """Training batches done when ``checkpoint`` was written: the ``step`` Lightning logs the next rows
    under after resuming it. A checkpoint written at a training batch's end (a step checkpoint, an
    interrupt's) holds that batch as processed but not completed, and its count of stepped batches not yet
    raised: Lightning completes and counts the batch on resume, so it is counted here too."""
    loops = checkpoint.get("loops", {}).get("fit_loop", {})
    stepped = int(loops.get("epoch_loop.state_dict", {}).get("_batches_that_stepped", 0))
    total = loops.get("epoch_loop.batch_progress", {}).get("total", {})
    at_batch_end = total.get("processed", 0) == total.get("completed", 0) + 1
    return stepped + int(at_batch_end)


class _ResumingWriter(ExperimentWriter):
    def __init__(self, log_dir: str, keep_steps_below: int | None) -> None:
        self._keep_steps_below = keep_steps_below
        super().__init__(log_dir)

    def _check_log_dir_exists(self) -> None:  # instead of deleting metrics.csv
        if self._keep_steps_below is None:  # a new run: Lightning's behaviour (warn, start a new file)
            super()._check_log_dir_exists()
            return
        if not os.path.isfile(self.metrics_file_path):
            return
        with open(self.metrics_file_path, newline="") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and int(float(r["step"])) < self._keep_steps_below]
        with open(self.metrics_file_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            writer.writerows(rows)
        self.metrics_keys = header


class ResumableCSVLogger(CSVLogger):
    """``CSVLogger`` that appends to the run folder's ``metrics.csv`` when resuming.

    Args:
        keep_steps_below: set when resuming (from :func:`trained_batches` of the checkpoint): rows with a
            smaller ``step`` are kept. None (a new run) behaves as ``CSVLogger``.
        *args, **kwargs: as ``CSVLogger``.
    """

    def __init__(self, *args, keep_steps_below: int | None = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.keep_steps_below = keep_steps_below

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ResumingWriter(self.log_dir, self.keep_steps_below)
        return self._experiment
