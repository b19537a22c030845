"""The rich consoles that every command prints through: text shown as text, never markup.

Kept apart from ``output`` (which imports typer and YAML for the commands' formats) so that
``gpuguard xid parse``, run by ``cli.entry`` without typer, prints its table with the same
console and only rich's start-up cost (issue 28). ``output.console``/``output.errors`` are the
two instances the commands share; ``make_console`` is the one way to build one.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment
from rich.text import Text

from gpuguard.cli import safe_text

PIPE_WIDTH = 200  # piped to a file or pager: wide enough that rows stay on one line


class SafeConsole(Console):
    """A rich console that never writes a control character it was given as text: strings
    are escaped and cut before layout (so tables stay aligned), and every text segment is
    escaped again as it is written (so a ``Text`` built elsewhere cannot slip one through)."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(safe_text.shown(text), **kwargs)

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            seg if seg.control else Segment(safe_text.visible(seg.text), seg.style)
            for seg in buffer
        )


def make_console(*, stderr: bool = False) -> Console:
    """A console that prints text as text, sized to the terminal or unwrapped when piped."""
    plain: dict[str, Any] = {"markup": False, "emoji": False, "highlight": False}
    console = SafeConsole(stderr=stderr, soft_wrap=False, **plain)
    if console.is_terminal or "COLUMNS" in os.environ:
        return console
    return SafeConsole(stderr=stderr, soft_wrap=False, width=PIPE_WIDTH, **plain)
