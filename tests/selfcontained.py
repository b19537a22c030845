"""What "the repository stands alone" means, as functions the tests and ``conftest`` share.

A clone with nothing beside it must pass its tests (CI runs ``scripts/test`` in exactly such a
clone), so no test or code path may reach a file beside the repository: not by a relative path
to a sibling folder, not by climbing ``Path(__file__).parents`` above the root, not by a
symlink, and not at run time. Reference data a test needs is copied into ``tests/data/`` with
a note saying where it came from (``tests/data/reference/NOTES.md``).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Folders that are not the repository's content: tools' caches and the virtualenv.
NOT_CONTENT = {
    ".git", ".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis",
}

# Text that names a place beside the repository: the sibling reference folder, by any spelling
# (the character classes keep this file from matching its own patterns).
OUTSIDE_PATTERNS = (
    re.compile(r"\.\./shared\b"),
    re.compile(r"\bshared/dat[a]\b"),
    re.compile(r"""/\s*["']shared["']"""),  # a Path joined with the sibling folder's name
    re.compile(r"/wor[k]/"),
)

_PARENTS_INDEX = re.compile(r"__file__\)(?:\.resolve\(\))?\.parents\[(\d+)\]((?:\.parent\b)*)")
_PARENT_CHAIN = re.compile(r"__file__\)(?:\.resolve\(\))?((?:\.parent\b)+)")


def content_files() -> Iterator[Path]:
    """Every file of the repository's content (not caches, not the virtualenv), symlinks too."""
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in NOT_CONTENT and not d.endswith(".egg-info"))
        for name in sorted(files + [d for d in dirs if Path(folder, d).is_symlink()]):
            if name not in NOT_CONTENT:  # a worktree's .git is a file
                yield Path(folder, name)


def text_of(path: Path) -> str | None:
    """The file's text, or None for binary files."""
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError):
        return None


def outside_references(path: Path, text: str) -> list[str]:
    """``"line: text"`` for every place in ``text`` that names a file beside the repository."""
    depth = len(path.relative_to(REPO).parts) - 1  # parents[depth] is the repository root
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if any(p.search(line) for p in OUTSIDE_PATTERNS) or _climbs_above(line, depth):
            found.append(f"{number}: {line.strip()}")
    return found


def _climbs_above(line: str, depth: int) -> bool:
    """Whether ``Path(__file__)...parents[N].parent...`` on this line goes above the root."""
    for match in _PARENTS_INDEX.finditer(line):
        if int(match[1]) + match[2].count(".parent") > depth:
            return True
    return any(m[1].count(".parent") - 1 > depth for m in _PARENT_CHAIN.finditer(line))


def beside_repository(path: str | os.PathLike[str]) -> bool:
    """Whether opening ``path`` reads something beside the repository rather than in it.

    Beside means under the repository's parent folder but not in the repository; hidden folders
    (a user's ``~/.cache`` when the clone sits in the home folder) and, when the clone sits
    directly in the temporary folder, pytest's ``tmp_path`` and ``tempfile``'s folders are not.
    """
    absolute = Path(os.path.abspath(os.fspath(path)))
    parent = REPO.parent
    if absolute.is_relative_to(REPO) or not absolute.is_relative_to(parent):
        return False
    first = absolute.relative_to(parent).parts[:1]
    return bool(first) and not first[0].startswith(_NOT_BESIDE_PREFIXES[parent == _TEMP])


_TEMP = Path(tempfile.gettempdir()).resolve()
# Names below the parent that are not beside the repository: hidden folders; and where the clone
# sits directly in the temporary folder, pytest's and tempfile's own folders and gpuguard's own
# scratch folders (``sim serve``'s, the demo's simulated host trees).
_NOT_BESIDE_PREFIXES = {False: (".",), True: (".", "pytest-of-", "tmp", "gpuguard-")}


# Reads seen by ``watch_reads`` since the last check: "event path" strings.
READS_BESIDE: list[str] = []
_WATCHED_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


def watch_reads(event: str, args: tuple[object, ...]) -> None:
    """A ``sys.addaudithook`` hook recording every open or listing of a path beside the repo.

    Audit hooks run inside the audited call, so this one records and never raises.
    """
    if event not in _WATCHED_EVENTS or not args:
        return
    path = args[0]
    if isinstance(path, str | bytes | os.PathLike):
        name = os.fsdecode(path)
        if beside_repository(name):
            READS_BESIDE.append(f"{event} {name}")


def take_reads_beside() -> list[str]:
    """The reads recorded since the last call, forgetting them."""
    taken = list(READS_BESIDE)
    READS_BESIDE.clear()
    return taken
