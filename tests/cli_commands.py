"""Every command path of the ``gpuguard`` CLI, read from the app itself, so a test over "every
command" also covers the commands added later."""

from __future__ import annotations

from typing import Any

import typer.main

from gpuguard.cli.main import app


def command_paths(command: Any = None, prefix: str = "") -> list[str]:
    """``["", "agent", ..., "xid parse"]``: the root, the groups and their commands."""
    command = typer.main.get_command(app) if command is None else command
    paths = [prefix.strip()]
    for name, child in sorted(getattr(command, "commands", {}).items()):
        paths += command_paths(child, f"{prefix} {name}")
    return paths


def leaf_commands() -> list[str]:
    """The paths that run something (not a group)."""
    paths = command_paths()
    return [p for p in paths if p and not any(q.startswith(f"{p} ") for q in paths)]
