"""The fast path for whole files: find the few kernel-log lines worth parsing at memchr speed.

A node's journal is gigabytes of lines of which a handful mention ``NVRM:``. Looking at each
line in Python would cost a second per few million lines; instead this reads 1 MiB chunks into
one reused buffer, jumps from one ``NVRM:`` to the next and counts the newlines in between with
``count`` (C loops), so only candidate lines are decoded and handed to ``XidLogParser``. The jump
is ripgrep's: memchr for the needle's rarest byte, then compare (see ``_find``).
Every line the parser acts on contains ``NVRM:``, so the events and counts are exactly those of
feeding it every line.

Like ``parse``, it imports only what scanning needs (no pathlib, no typing at run time): ``gpuguard
xid parse`` on a file without an ``NVRM:`` line starts in the interpreter's own time.
"""

from __future__ import annotations

import os

from gpuguard.errors import InputError
from gpuguard.kernlog import parse

TYPE_CHECKING = False  # typing's own flag, without importing typing (mypy reads either)
if TYPE_CHECKING:
    from collections.abc import Callable, Generator, Iterator
    from typing import Protocol, TypeAlias

    from gpuguard.model import xid

    class BinaryReader(Protocol):
        """What the scanner needs of a stream: files opened ``"rb"``, ``io.BytesIO``, stdin's
        buffer. ``readinto`` lets one buffer serve the whole file: no allocation per chunk."""

        def readinto(self, buffer: memoryview, /) -> int | None: ...

    Source: TypeAlias = str | os.PathLike[str] | BinaryReader
    Find: TypeAlias = Callable[[bytearray, int, int], int]  # where the marker is next, or -1

CHUNK_SIZE = 1024 * 1024  # small enough that find and count reuse the CPU cache
# Longer "lines" (binary junk without newlines) are cut here so memory stays bounded.
MAX_LINE_BYTES = 1024 * 1024
_NEEDLE = parse.NVRM_MARKER.encode()
# ripgrep's literal search: memchr for the needle's rarest byte in ordinary text, then compare.
# ``V`` is one byte in 1,200 of the bench's kernel journal (``N`` one in 200, ``:`` one in 26),
# and ``bytearray.find`` of one byte is libc's vectorised memchr, where the regex engine's prefix
# scan (0.44 s/GB here) and a multi-byte ``find`` (0.70) compare byte by byte.
_RARE_BYTE = b"V"
_RARE_AT = _NEEDLE.index(_RARE_BYTE)
# Text dense in ``V`` (not ``NVRM:``) would cost a Python step per ``V``: past this many misses,
# plus one per KiB searched (the bench's journal has 0.8), a search finishes in the regex
# engine's scan. Text where one byte in five is a V then costs 1.1-1.9 s/GB, not 0.7 (bench/).
_MISSES_ALLOWED = 64
_NEWLINE = b"\n"


def scan_file(
    source: Source, parser: parse.XidLogParser | None = None, *, chunk_size: int = CHUNK_SIZE
) -> Iterator[xid.KernelEvent]:
    """Every event in a kernel-log file (a path, or a binary stream such as stdin's buffer).

    Pass a ``parser`` to set its year/zone or to read its ``stats`` afterwards. Raises
    InputError naming the file when it cannot be opened or read; never on its contents.
    """
    reader = parser if parser is not None else parse.XidLogParser()
    if isinstance(source, str | os.PathLike):
        return _scan_path(posix_path(os.fspath(source)), reader, chunk_size)
    return _scan_stream(source, _stream_name(source), reader, chunk_size)


def posix_path(text: str) -> str:
    """``text`` as ``str(pathlib.Path(text))`` writes it on POSIX (``./a//b/`` → ``a/b``, ``""``
    → ``.``), without importing pathlib, which costs more than the rest of ``xid parse``'s
    start: the file opened and named in errors is the one ``Path`` would have named."""
    two_slashes = text.startswith("//") and not text.startswith("///")  # POSIX keeps exactly two
    root = "//" if two_slashes else "/" if text.startswith("/") else ""
    return root + "/".join(part for part in text.split("/") if part not in ("", ".")) or "."


def _scan_path(
    path: str, parser: parse.XidLogParser, chunk_size: int
) -> Iterator[xid.KernelEvent]:
    try:
        stream = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by the with below
    except OSError as e:
        raise InputError(f"cannot read kernel log {path}: {e.strerror or e}") from e
    with stream:
        yield from _scan_stream(stream, path, parser, chunk_size)


def _scan_stream(
    stream: BinaryReader, name: str, parser: parse.XidLogParser, chunk_size: int
) -> Iterator[xid.KernelEvent]:
    buffer = bytearray(chunk_size + MAX_LINE_BYTES)
    view = memoryview(buffer)
    kept = 0  # bytes of an unfinished line, moved to the front of the buffer
    lines_before = 0
    discarding = False  # inside an over-long line whose head was already fed
    while size := _read_into(stream, view[kept : kept + chunk_size], name):
        end = kept + size
        start = 0
        if discarding:
            start = buffer.find(_NEWLINE, 0, end) + 1
            if start == 0:
                continue
            discarding, lines_before = False, lines_before + 1
        last_newline = buffer.rfind(_NEWLINE, start, end)
        complete = start if last_newline < 0 else last_newline + 1
        lines_before += yield from _scan_block(buffer, start, complete, lines_before, parser)
        kept = end - complete
        if kept > MAX_LINE_BYTES:
            head = view[complete : complete + MAX_LINE_BYTES]
            yield from _feed_candidate(head, lines_before + 1, parser)
            kept, discarding = 0, True
        elif complete:
            buffer[:kept] = buffer[complete:end]  # a copy: the two ranges may overlap
    if kept or discarding:
        yield from _feed_candidate(view[:kept], lines_before + 1, parser)
        lines_before += 1
    parser.advance_to(lines_before)


def _scan_block(
    buffer: bytearray, start: int, end: int, lines_before: int, parser: parse.XidLogParser
) -> Generator[xid.KernelEvent, None, int]:
    """Feed the candidate lines of ``buffer[start:end]`` (whole lines); return its line count."""
    line_no = lines_before
    position = start
    while (hit := _find(buffer, position, end)) >= 0:
        previous_newline = buffer.rfind(_NEWLINE, position, hit)
        line_start = position if previous_newline < 0 else previous_newline + 1
        line_stop = buffer.find(_NEWLINE, hit, end)
        line_no += buffer.count(_NEWLINE, position, line_start) + 1
        event = parser.feed(_decode(buffer[line_start:line_stop]), line_no)
        if event is not None:
            yield event
        position = line_stop + 1
    line_no += buffer.count(_NEWLINE, position, end)
    return line_no - lines_before


def _find(buffer: bytearray, start: int, end: int) -> int:
    """Where ``NVRM:`` next starts in ``buffer[start:end]``, or -1: memchr to each ``V``,
    ``startswith`` to check it (no copy); too many misses and the regex engine finishes."""
    misses_left = _MISSES_ALLOWED + ((end - start) >> 10)
    rare = buffer.find(_RARE_BYTE, start + _RARE_AT, end)
    while rare >= 0:
        if buffer.startswith(_NEEDLE, rare - _RARE_AT, end):
            return rare - _RARE_AT
        misses_left -= 1
        if not misses_left:  # every needle starting before this V's has been ruled out
            return _literal_search()(buffer, rare - _RARE_AT + 1, end)
        rare = buffer.find(_RARE_BYTE, rare + 1, end)
    return -1


_searches: list[Find] = []  # the regex engine's literal search, made at its first use


def _literal_search() -> Find:
    if not _searches:
        import re

        search = re.compile(re.escape(_NEEDLE)).search

        def find(buffer: bytearray, start: int, end: int) -> int:
            found = search(buffer, start, end)
            return -1 if found is None else found.start()

        _searches.append(find)
    return _searches[0]


def _feed_candidate(
    line: memoryview, line_no: int, parser: parse.XidLogParser
) -> Iterator[xid.KernelEvent]:
    text = _decode(line)
    if parse.NVRM_MARKER in text and (event := parser.feed(text, line_no)) is not None:
        yield event


def _read_into(stream: BinaryReader, into: memoryview, name: str) -> int:
    try:
        return stream.readinto(into) or 0
    except OSError as e:
        raise InputError(f"cannot read kernel log {name}: {e.strerror or e}") from e


def _decode(line: bytes | bytearray | memoryview) -> str:
    return str(line, "utf-8", errors="replace")


def _stream_name(stream: BinaryReader) -> str:
    name = getattr(stream, "name", None)
    return name if isinstance(name, str) else "<stream>"
