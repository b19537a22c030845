"""The ``gpuguard`` command line (typer + rich). Each command group lives in its own module;
``main`` assembles them. Commands parse flags, call the layers, and render results."""

import time

STARTED = time.monotonic()
"""When the command line started loading (this package is its first import): a command's
deadline counts from here, its start-up included (``cli.deadline``)."""
