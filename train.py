"""Train a base classifier for randomized smoothing: ``python train.py method=gaussian sigma=0.5``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rs_lightning.cli.common import exit_if_config_invalid, exit_if_run_dir_unwritable, run_or_exit
from rs_lightning.cli.train import train

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    result = run_or_exit(train, cfg)
    return result["metrics"].get(cfg.get("optimized_metric")) if cfg.get("optimized_metric") else None


if __name__ == "__main__":
    exit_if_run_dir_unwritable(sys.argv[1:])
    exit_if_config_invalid(sys.argv[1:], CONF, "train")
    main()
