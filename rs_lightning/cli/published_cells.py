"""``python -m rs_lightning.cli.published_cells list | shell DATASET SIGMA METHOD``: the published cells
(:data:`~rs_lightning.analysis.published_numbers.PUBLISHED`), one line each, or one cell's protocol as shell
assignments (``scripts/reproduce.sh`` reads them); a bad cell is one line ``error: ...`` and status 2."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rs_lightning.analysis.published_numbers import PUBLISHED, UnknownCellError, cell


def main(argv: Sequence[str] | None = None) -> int:
    """``shell DATASET SIGMA METHOD``: the cell's protocol as shell assignments; ``list``: every cell."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["list"]:
        for (dataset, method, sigma), c in PUBLISHED.items():
            print(f"{dataset}\t{sigma:g}\t{method}\t{c.experiment}\tACR {c.acr:g}\t{c.source}")
        return 0
    if len(argv) != 4 or argv[0] != "shell":
        usage = "python -m rs_lightning.cli.published_cells shell DATASET SIGMA METHOD | list"
        print(f"error: usage: {usage}", file=sys.stderr)
        return 2
    _, dataset, sigma, method = argv
    try:
        found = cell(dataset, method, sigma)
    except UnknownCellError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    p = found.protocol
    values = {
        "CELL_DATASET": found.dataset,
        "CELL_METHOD": found.method,
        "CELL_SIGMA": repr(found.sigma),
        "CELL_EXPERIMENT": found.experiment,
        "CELL_N0": p.n0,
        "CELL_N": p.n,
        "CELL_ALPHA": repr(p.alpha),
        "CELL_START": p.start,
        "CELL_SKIP": p.skip,
        "CELL_NUM_IMAGES": p.num_images,
        "CELL_MAX": p.start + p.skip * p.num_images,
        "CELL_SOURCE": f"'{found.source}'",
    }
    print(" ".join(f"{k}={v}" for k, v in values.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
