"""Certify a trained smoothed classifier (Cohen et al. 2019): ``python certify.py checkpoint=PATH``."""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rs_lightning.cli.certify import certify
from rs_lightning.cli.common import (
    RUN_DIR_KEYS,
    exit_if_config_invalid,
    exit_if_run_dir_unwritable,
    run_or_exit,
)

CONF = Path(__file__).resolve().parent / "conf"


@hydra.main(version_base="1.3", config_path="conf", config_name="certify")
def main(cfg: DictConfig) -> None:
    run_or_exit(certify, cfg)


def run_dir_follows_output_dir(argv: list[str]) -> list[str]:
    """``output_dir=X`` without ``hydra.run.dir``: Hydra's run folder (``.hydra/``, the log) is X as well,
    instead of a second folder under ``outputs/`` in the current directory."""
    given = [a.split("=", 1)[1] for a in argv if a.startswith("output_dir=")]
    if (
        given
        and "-m" not in argv
        and "--multirun" not in argv
        and not any(a.startswith("hydra.run.dir=") for a in argv)
    ):
        return [*argv, f"hydra.run.dir={given[-1]}"]
    return argv


if __name__ == "__main__":
    exit_if_run_dir_unwritable(sys.argv[1:], (*RUN_DIR_KEYS, "output_dir"))
    sys.argv = [sys.argv[0], *run_dir_follows_output_dir(sys.argv[1:])]
    exit_if_config_invalid(sys.argv[1:], CONF, "certify")
    main()
