"""The one place where a failed command becomes one line on stderr and an exit code.

Every command raises; nothing below the CLI prints errors. Here an exception is turned into
``error: <what was wrong, naming the input>`` and an exit status scripts can trust:

- 2: the input was bad — a flag, an argument, a file, a settings field or variable
  (``InputError``, click's usage errors, pydantic validation, unreadable or unparsable files,
  a port that cannot be bound);
- 1: a dependency failed — the API server or Prometheus unreachable or answering nonsense
  (``SourceError`` and the rest of ``GpuguardError``), the command's overall deadline ran out
  (``cli.deadline``), and anything unexpected;
- 130: interrupted (Ctrl-C).

The traceback is shown only with ``gpuguard --debug``.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import Any

import pydantic
import typer
import typer.core
import yaml

# typer vendors click (typer._click); its commands raise these, not the ``click`` package's.
from typer._click import exceptions as click

from gpuguard.cli import deadline, output
from gpuguard.errors import GpuguardError, InputError

BAD_INPUT = 2
FAILED = 1
INTERRUPTED = 130
_BAD_PATH_ERRNOS = {
    errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS,
    errno.ENAMETOOLONG, errno.ELOOP,
}


def describe(exc: BaseException) -> tuple[int, str]:
    """The exit status and the one-line message for ``exc``."""
    match exc:
        case click.UsageError():
            command = exc.ctx.command_path if exc.ctx else "gpuguard"
            return BAD_INPUT, f"{exc.format_message()} (see '{command} --help')"
        case click.ClickException():
            return exc.exit_code, exc.format_message()
        case InputError():
            return BAD_INPUT, str(exc)
        case GpuguardError():
            return FAILED, str(exc)
        case pydantic.ValidationError():
            return BAD_INPUT, _validation(exc)
        case yaml.YAMLError():
            return BAD_INPUT, f"not valid YAML: {exc}"
        case UnicodeDecodeError():
            return BAD_INPUT, f"not a text file (UTF-8 expected): {exc.reason} at byte {exc.start}"
        case OSError():
            return _os_error(exc)
        case KeyboardInterrupt():
            return INTERRUPTED, "interrupted"
        case deadline.DeadlineExceeded():
            return FAILED, str(exc)
        case _:
            return FAILED, (
                f"unexpected {type(exc).__name__}: {exc} (rerun with `gpuguard --debug ...` "
                "for the traceback and report it)"
            )


def _validation(exc: pydantic.ValidationError) -> str:
    items = [
        f"{'.'.join(str(p) for p in item['loc']) or exc.title}: {item['msg']}"
        for item in exc.errors()
    ]
    return "invalid " + exc.title + ": " + "; ".join(items)


def _os_error(exc: OSError) -> tuple[int, str]:
    what = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        return BAD_INPUT, f"{what}: choose another port (or stop what listens there)"
    if exc.filename is not None:
        code = BAD_INPUT if exc.errno in _BAD_PATH_ERRNOS else FAILED
        return code, f"{exc.filename}: {what}"
    return FAILED, what


@contextlib.contextmanager
def listening(flag: str, port: int) -> Iterator[None]:
    """A port that cannot be bound (in use, privileged) is bad input naming its flag."""
    try:
        yield
    except OSError as e:
        if e.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        raise InputError(f"{flag} {port}: cannot listen: {e.strerror or e}") from e


class GuardedGroup(typer.core.TyperGroup):
    """The root command group: runs a command and turns any failure into one line."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        output.reset()
        deadline.begin(process=args is None)  # the program's own argv, not a caller's list
        try:
            result = super().main(
                argv, prog_name or "gpuguard", complete_var, standalone_mode=False, **extra
            )
        except click.NoArgsIsHelpError as e:
            sys.stdout.write((e.ctx.get_help() if e.ctx else str(e)) + "\n")
            return _finish(0, standalone_mode)
        except typer.Abort:
            output.error_line("aborted")
            return _finish(FAILED, standalone_mode)
        except (Exception, KeyboardInterrupt, deadline.DeadlineExceeded) as e:
            if "--debug" in argv:
                traceback.print_exception(e)
            return _finish(report(e), standalone_mode)
        return _finish(result if isinstance(result, int) else 0, standalone_mode)


def report(exc: BaseException) -> int:
    """Print ``exc`` as the one ``error:`` line on stderr; its exit status."""
    code, message = describe(exc)
    output.error_line(message)
    return code


def _finish(code: int, standalone_mode: bool) -> int:
    if standalone_mode:
        sys.exit(code)
    return code
