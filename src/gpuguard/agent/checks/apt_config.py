"""A small reader of APT's configuration language, enough for unattended-upgrades settings.

APT reads ``/etc/apt/apt.conf.d/*`` in name order (only names of ``[A-Za-z0-9_.-]`` with no
extension or ``.conf``, so ``*.dpkg-old`` is ignored), then ``/etc/apt/apt.conf``. Keys are
case-insensitive and nest with ``::`` or ``{ }``; a later scalar wins, list items accumulate,
``#clear`` empties a key. Comments are ``//``, ``/* */`` and ``#`` (up to the end of line).
``#include`` is not followed (documented gap).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from gpuguard.agent.checks import hostfs

PARTS_DIR = "etc/apt/apt.conf.d"
MAIN_FILE = "etc/apt/apt.conf"
_PART_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
_LEXEME = re.compile(
    r"""(?P<string>"[^"]*")
      | (?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<directive>\#[^\n]*)
      | (?P<punct>[{};])
      | (?P<word>[^\s{};"]+)
      | (?P<space>\s+)""",
    re.VERBOSE | re.DOTALL,
)


@dataclass
class AptConfig:
    """Scalars (value, host path that set it) and list items, by lower-cased key."""

    scalars: dict[str, tuple[str, str]] = field(default_factory=dict)
    lists: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    files: list[str] = field(default_factory=list)

    def scalar(self, key: str) -> tuple[str, str] | None:
        return self.scalars.get(key.lower())

    def items(self, key: str) -> list[str]:
        return list(self.lists.get(key.lower(), []))

    def clear(self, key: str) -> None:
        key = key.lower()
        for table in (self.scalars, self.lists):
            for existing in [k for k in table if k == key or k.startswith(key + "::")]:
                del table[existing]


def _tokens(text: str, source: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(text):
        match = _LEXEME.match(text, position)
        if match is None:  # an unterminated string or comment
            raise hostfs.HostReadError(f"{source}: unterminated quote or comment")
        kind = match.lastgroup or "space"
        if kind not in ("space", "comment"):
            tokens.append(
                (
                    kind,
                    match.group().strip().strip('"') if kind == "string" else match.group().strip(),
                )
            )
        position = match.end()
    return tokens


def _directive(text: str, config: AptConfig) -> None:
    words = text.lstrip("#").rstrip(";").split()
    if len(words) >= 2 and words[0] == "clear":
        for key in words[1:]:
            config.clear(key.rstrip(";"))


def _parse(text: str, source: str, config: AptConfig) -> None:
    scope: list[str] = []
    tokens = _tokens(text, source)
    index = 0
    while index < len(tokens):
        kind, value = tokens[index]
        following = tokens[index + 1] if index + 1 < len(tokens) else ("", "")
        index += 1
        if kind == "directive":
            _directive(value, config)
        elif (kind, value) == ("punct", "}"):
            if not scope:
                raise hostfs.HostReadError(f"{source}: unbalanced '}}'")
            scope.pop()
        elif kind == "punct":
            continue
        elif kind == "string":
            config.lists["::".join(scope).lower()].append(value)
        elif following == ("punct", "{"):
            scope.append(value.rstrip(":"))
            index += 1
        elif following[0] in ("string", "word"):
            _assign("::".join([*scope, value]), following[1], source, config)
            index += 1
        else:
            raise hostfs.HostReadError(f"{source}: no value for {value!r}")
    if scope:
        raise hostfs.HostReadError(f"{source}: unclosed '{{' after {'::'.join(scope)}")


def _assign(key: str, value: str, source: str, config: AptConfig) -> None:
    if key.endswith("::"):
        config.lists[key[:-2].lower()].append(value)
    else:
        config.scalars[key.lower()] = (value, source)


def config_files(root: Path) -> list[str]:
    """Host paths APT reads, in order; HostReadError when there is no /etc/apt at all."""
    if not hostfs.exists(root, "etc/apt"):
        raise hostfs.HostReadError("/etc/apt: not found (not an APT-based host?)")
    parts = []
    if hostfs.exists(root, PARTS_DIR):
        parts = [
            f"{PARTS_DIR}/{name}"
            for name in hostfs.list_dir(root, PARTS_DIR)
            if _PART_NAME.match(name) and ("." not in name or name.endswith(".conf"))
        ]
    return parts + ([MAIN_FILE] if hostfs.exists(root, MAIN_FILE) else [])


def load(root: Path) -> AptConfig:
    config = AptConfig()
    for rel in config_files(root):
        _parse(hostfs.read_text(root, rel), hostfs.shown(rel), config)
        config.files.append(hostfs.shown(rel))
    return config
