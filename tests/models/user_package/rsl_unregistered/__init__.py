"""Importable but registered by no entry point: importing it leaves a marker file, so a test can show that a
checkpoint naming it imports nothing."""

import os
from pathlib import Path

from torch import nn

if os.environ.get("RSL_IMPORT_MARKER"):
    Path(os.environ["RSL_IMPORT_MARKER"]).write_text("imported")


class Net(nn.Linear):
    def __init__(self, *, input_shape, num_classes):
        super().__init__(int(input_shape[0] * input_shape[1] * input_shape[2]), int(num_classes))
