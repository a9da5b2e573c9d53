"""``certify.py trainer=ddp|ddp_sim``: certification split across Lightning DDP ranks.

Rank r takes the indices at positions r, r + world_size, ... of the run's explicit index list (no sampler, so
no padding and no duplicates), skips those already in any part file (a resumed run, whatever its world size
was), and appends its rows to its own part file ``certify.shard-<rank>-of-<world>.tsv``
(the layout of ``shard=i/k``, :mod:`rs_lightning.analysis.results`); afterwards the parts are merged into
``certify.tsv``. Rows do not depend on the rank that made them (noise seeded by ``(seed, idx, phase)``),
so the merged file equals a single-process run's except for the ``time`` column, whatever the world size,
and a killed run resumes with any world size.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader
from tqdm import tqdm

from rs_lightning.analysis.results import ResultWriter, done_indices, shard_table
from rs_lightning.smoothing import CertificationSpec, run_dataset

from .common import tune_cpu_allocator

TRAINING_ONLY = ("_target_", "max_epochs", "check_val_every_n_epoch", "log_every_n_steps", "default_root_dir")


class RankCertification(pl.LightningModule):
    """Certifies this rank's share of ``indices`` in one ``predict_step`` and writes its part file. The share
    depends on the position in ``indices`` only, so ranks starting at different times (each reading the part
    files, which other ranks may already be writing) still split the work exactly."""

    def __init__(
        self, model, dataset, indices: list[int], spec: CertificationSpec, num_classes: int, table: Path,
        columns: tuple[str, ...], make_rows,
    ) -> None:  # fmt: skip
        super().__init__()
        self.model = model
        self.dataset, self.indices, self.spec = dataset, list(indices), spec
        self.num_classes, self.table, self.columns, self.make_rows = (
            num_classes,
            Path(table),
            columns,
            make_rows,
        )

    def setup(self, stage: str) -> None:
        if self.trainer.strategy.root_device.type == "cpu":
            tune_cpu_allocator()  # spawned ranks are new interpreters: glibc's defaults cost ~35% (bench/)

    def predict_dataloader(self) -> DataLoader:
        share = self.indices[self.global_rank :: self.trainer.world_size]
        done = done_indices(self.table)
        return DataLoader([[i for i in share if i not in done]], batch_size=None, collate_fn=lambda x: x)

    def predict_step(self, mine: list[int], batch_idx: int) -> None:
        world = self.trainer.world_size
        part = shard_table(self.table, (self.global_rank, world))
        progress = tqdm(
            total=len(mine) * world, unit="input", desc=f"{self.spec.mode} (rank 0 x {world} ranks)",
            disable=self.global_rank != 0, dynamic_ncols=True, mininterval=1.0,
        )  # fmt: skip
        with ResultWriter(part, self.columns) as writer:
            for result, labels, seconds in run_dataset(
                self.model, self.dataset, mine, self.spec, num_classes=self.num_classes, device=self.device
            ):
                for row in self.make_rows(result, labels, seconds):
                    writer.write(row)
                progress.update(min(len(labels) * world, progress.total - progress.n))
        progress.close()


def certification_trainer(cfg_trainer: DictConfig) -> pl.Trainer:
    """A Lightning Trainer from a ``trainer=`` config, without its training-only keys or any logging."""
    kwargs: dict[str, Any] = OmegaConf.to_container(cfg_trainer, resolve=False)  # type: ignore[assignment]
    kwargs = {k: v for k, v in kwargs.items() if k not in TRAINING_ONLY}
    kwargs.update(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        use_distributed_sampler=False, precision="32-true",
    )  # fmt: skip
    return pl.Trainer(**kwargs)


def certify_on_ranks(trainer: pl.Trainer, module: RankCertification) -> bool:
    """Run the ranks; True in the process that should merge (rank 0, or the launcher of spawned ranks)."""
    trainer.predict(module, return_predictions=False)
    trainer.strategy.barrier()
    return trainer.global_rank == 0
