"""One rule for text that gpuguard prints or exports but did not write itself.

Node names, annotations, kernel-log lines, ledger fields and error messages carry whatever a
person or a process put there. Printed raw, an ``ESC [`` or ``ESC ]`` sequence repaints the
reader's terminal (or hides a line, or plants a hyperlink); a CSV cell that starts with ``=``,
``+``, ``-`` or ``@`` is run as a formula by a spreadsheet; a 100,000-character value buries
everything around it. So, for everything shown:

- control characters (C0 but newline and tab, DEL, C1) and the bidirectional overrides are
  escaped visibly, Python-style (``\\x1b``, ``\\x9b``, ``\\u202e``), never dropped;
- a line longer than :data:`LINE_LIMIT` is cut, and says how long it was;
- a CSV cell that a spreadsheet would read as a formula is prefixed with ``'`` (OWASP's rule
  for CSV injection), after the escaping above.

JSON and YAML output need none of this: their encoders escape control characters themselves.
"""

from __future__ import annotations

import re

LINE_LIMIT = 2000  # characters of one printed line (a drafted request fits); the rest is cut
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character written out (``ESC`` -> ``\\x1b``); newlines
    and tabs kept."""
    return _UNSAFE.sub(_escape, text)


def cut(text: str, limit: int = LINE_LIMIT) -> str:
    """``text`` if at most ``limit`` characters, else its start and ``… (N chars)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text)} chars)"


def shown(text: str, limit: int = LINE_LIMIT) -> str:
    """Safe to print: control characters escaped, each line cut at ``limit``."""
    return "\n".join(cut(line, limit) for line in visible(text).split("\n"))


def csv_cell(value: object) -> str:
    """A CSV cell no spreadsheet runs as a formula: escaped as :func:`visible`, and ``'``
    before a leading ``= + - @`` (or tab, CR)."""
    text = "" if value is None else visible(str(value))
    return "'" + text if text.startswith(FORMULA_STARTS) else text
