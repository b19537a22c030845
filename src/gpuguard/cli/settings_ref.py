"""``gpuguard settings``: every setting with its type, default and what it does, generated
from the settings model (``model.settings_reference``); ``--markdown`` prints
docs/settings.md."""

from __future__ import annotations

import dataclasses
from typing import Annotated

import typer

from gpuguard.cli import output
from gpuguard.model import settings_reference


def settings(
    fmt: output.FormatOpt = output.Format.TABLE,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print docs/settings.md (the reference as Markdown tables).",
    )] = False,
) -> None:
    """Every setting: its path (and GPUGUARD_ variable), type, default and what it does.

    \b
    Examples:
      gpuguard settings
      gpuguard settings -o json | jq '.[] | select(.path | startswith("isolation."))'
      gpuguard settings --markdown > docs/settings.md
    """
    found = settings_reference.reference()
    if markdown:
        output.line(settings_reference.markdown(found).removesuffix("\n"))
        return
    rows = [{**dataclasses.asdict(s), "variable": s.variable} for s in found]
    if not output.emit(rows, fmt):
        output.table(f"{len(rows)} settings", ["setting", "type", "default", "what it does"],
                     [[s.path, s.type, s.default, s.help] for s in found])
