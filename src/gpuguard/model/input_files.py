"""Reading a file a person named (``--config``, ``--slices``, an override or scenario file):
bounded, and only a regular file.

A settings file of 120 MB would be parsed whole before anything is checked; a FIFO or
``/dev/zero`` would block or never end. Every file gpuguard takes as input is read through
:func:`read_text`, which refuses what is not a regular file or is larger than a sane limit,
with an ``InputError`` that names the file (and the flag, when the caller gives it).
"""

from __future__ import annotations

import stat
from pathlib import Path

from gpuguard.errors import InputError

LIMIT_BYTES = 8 * 1024 * 1024  # far above any real settings, scenario or object list


def read_text(path: Path, *, what: str = "", limit: int = LIMIT_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` of at most ``limit`` bytes.

    ``what`` names the input in the error (``"--config"``); the path is always named.
    """
    where = f"{what} {path}".strip()
    try:
        info = path.stat()  # before opening: a FIFO would block
        _check_regular(info.st_mode, info.st_size, where, limit)
        with path.open("rb") as handle:
            data = handle.read(limit + 1)
    except OSError as e:
        raise InputError(f"{where}: cannot read: {e.strerror or e}") from e
    if len(data) > limit:
        raise InputError(f"{where}: larger than {limit // (1024 * 1024)} MiB: not an input file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{where}: not a text file (UTF-8 expected): {e.reason} at byte "
                         f"{e.start}") from e


def _check_regular(mode: int, size: int, where: str, limit: int) -> None:
    if not stat.S_ISREG(mode):
        raise InputError(f"{where}: not a regular file (a FIFO, device or directory)")
    if size > limit:
        raise InputError(
            f"{where}: {size} bytes, larger than {limit // (1024 * 1024)} MiB: "
            "not an input file"
        )
