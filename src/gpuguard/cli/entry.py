"""The ``gpuguard`` executable: answers the commands that must start in a blink without
importing the command line, and hands every other command line to ``cli.main``.

``cli.main`` imports typer, rich, pydantic and every command group — over half a second on a
loaded node before anything runs (issue 28). ``gpuguard --version`` and ``gpuguard xid parse``
(run by scripts, in pipelines, over whole journals) need none of it, so this module reads
exactly their plain forms with the standard library: ``--version`` alone, and ``xid parse``
with at most a file, ``--json``, ``-o/--output table|json|yaml`` and ``--year N``, each once.
Anything else — ``--help``, a flag it does not know, a repeated option, a value typer would
have to judge — goes to typer, which answers it as before; tests/unit/test_cli_entry.py runs
both on the same command lines and checks what start-up imports.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's own flag, without importing typing (mypy reads either)
if TYPE_CHECKING:
    from collections.abc import Sequence

COMPLETE_VAR = "_GPUGUARD_COMPLETE"  # click's shell-completion request: typer answers it
_FORMATS = ("table", "json", "yaml")  # the values of output.Format
_VALUE_OPTIONS = {"-o": "--output", "--output": "--output", "--year": "--year"}


def main(argv: Sequence[str] | None = None) -> None:
    """Run one ``gpuguard`` command line (``sys.argv[1:]`` by default) and exit."""
    args = list(sys.argv[1:] if argv is None else argv)
    code = run_fast(args)
    if code is None:
        from gpuguard.cli.main import app

        app(args)
    sys.exit(code)


def run_fast(args: list[str]) -> int | None:
    """The exit status of a command answered here; None when typer must answer it."""
    if COMPLETE_VAR in os.environ:
        return None
    if args == ["--version"]:
        sys.stdout.write(version_line() + "\n")
        return 0
    if args[:2] == ["xid", "parse"] and (chosen := xid_parse_args(args[2:])) is not None:
        return _guarded(*chosen)
    return None


def version_line() -> str:
    """``gpuguard 0.1.0``: the package's version (pyproject reads it from ``gpuguard``)."""
    import gpuguard

    return f"gpuguard {gpuguard.__version__}"


def xid_parse_args(args: list[str]) -> tuple[str, str, int | None] | None:
    """``(file, format, year)`` of ``xid parse``'s plain forms; None for anything else."""
    from gpuguard.cli import xid_events

    file: str | None = None
    values: dict[str, str] = {}
    as_json = False
    rest = iter(args)
    for arg in rest:
        name, equals, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        if name in _VALUE_OPTIONS and _VALUE_OPTIONS[name] not in values:
            given = value if equals else next(rest, None)
            if given is None:
                return None
            values[_VALUE_OPTIONS[name]] = given
        elif arg == "--json" and not as_json:
            as_json = True
        elif file is None and arg and (arg == xid_events.STDIN_NAME or not arg.startswith("-")):
            file = arg
        else:
            return None
    fmt, year = values.get("--output", "table"), values.get("--year")
    if fmt not in _FORMATS or (year is not None and not (year.isascii() and year.isdigit())):
        return None
    chosen_fmt = "json" if as_json else fmt
    return file or xid_events.STDIN_NAME, chosen_fmt, None if year is None else int(year)


def _guarded(file: str, fmt: str, year: int | None) -> int:
    """``xid_events.run``, its failure turned into one line and an exit status as typer's
    commands have it (``cli.failures``, imported only when something failed)."""
    from gpuguard.cli import xid_events

    try:
        return xid_events.run(file, fmt, year)
    except (Exception, KeyboardInterrupt) as e:
        from gpuguard.cli import failures

        return failures.report(e)


if __name__ == "__main__":  # pragma: no cover - `python -m gpuguard.cli.entry`, as the executable
    main()
