"""Certify a trained smoothed classifier (Cohen et al. 2019): ``python certify.py checkpoint=PATH``."""

import hydra
from omegaconf import DictConfig

from rs_lightning.cli.certify import certify
from rs_lightning.cli.common import run_or_exit


@hydra.main(version_base="1.3", config_path="conf", config_name="certify")
def main(cfg: DictConfig) -> None:
    run_or_exit(certify, cfg)


if __name__ == "__main__":
    main()
