"""``python -m rs_lightning.cli.report``."""

import sys

from . import main

sys.exit(main())
