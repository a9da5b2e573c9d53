"""Test helpers: compose the real Hydra config tree in-process as the entry points do."""

from __future__ import annotations

import os
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


def shared_data_dir() -> Path | None:
    """../shared/data next to the repository (or $RS_SHARED_DATA), if present."""
    candidates = [os.environ.get("RS_SHARED_DATA"), REPO.parent / "shared" / "data"]
    for candidate in candidates:
        if candidate and Path(candidate).is_dir():
            return Path(candidate)
    return None


def compose_config(name: str, overrides: list[str] | None = None) -> DictConfig:
    """Compose ``conf/<name>.yaml`` as the entry points do (without Hydra's runtime)."""
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name=name, overrides=overrides or [])


def train_config(tmp_path: Path, overrides: list[str] | None = None) -> DictConfig:
    """A training config writing into ``tmp_path``, quiet and fast by default."""
    cfg = compose_config(
        "train",
        [
            f"paths.output_dir={tmp_path}",
            "trainer.enable_progress_bar=false",
            "trainer.enable_model_summary=false",
            *(overrides or []),
        ],
    )
    return cfg


def certify_config(tmp_path: Path, checkpoint: str | Path, overrides: list[str] | None = None) -> DictConfig:
    cfg = compose_config(
        "certify", [f"checkpoint={checkpoint}", f"output_dir={tmp_path}", *(overrides or [])]
    )
    with open_dict(cfg):
        cfg.device = "cpu"
    return cfg
