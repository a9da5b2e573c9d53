"""CAT-RS preprocessing: ``python soft_labels.py checkpoint=PATH output=FILE.npy [num_samples=10000]``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rs_lightning.cli.common import exit_if_config_invalid, exit_if_run_dir_unwritable, run_or_exit
from rs_lightning.cli.soft_labels import soft_labels

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="soft_labels")
def main(cfg: DictConfig) -> None:
    run_or_exit(soft_labels, cfg)


if __name__ == "__main__":
    exit_if_run_dir_unwritable(sys.argv[1:])
    exit_if_config_invalid(sys.argv[1:], CONF, "soft_labels")
    main()
