"""The ``gpuguard`` command line (typer + rich). Each command group lives in its own module;
``main`` assembles them. Commands parse flags, call the layers, and render results."""
