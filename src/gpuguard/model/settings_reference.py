"""The settings reference, generated from the settings model itself: every setting's path,
type, default and help, so ``gpuguard settings`` and docs/settings.md can never drift from
``model/settings.py`` (a test checks the doc against this)."""

from __future__ import annotations

import enum
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from gpuguard.model import durations
from gpuguard.model import settings as settings_model


@dataclass(frozen=True, slots=True)
class Setting:
    path: str  # isolation.hold_window
    type: str  # duration, int, list of int, ...
    default: str  # as written in a settings file
    help: str

    @property
    def variable(self) -> str:
        return "GPUGUARD_" + self.path.upper().replace(".", "__")


def reference(model: type[BaseModel] = settings_model.GuardSettings) -> tuple[Setting, ...]:
    """Every leaf setting of ``model``, in declaration order."""
    return tuple(_walk(model, ""))


def _walk(model: type[BaseModel], prefix: str) -> Iterator[Setting]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            yield from _walk(field.annotation, f"{path}.")
            continue
        text = " ".join((field.description or "").split())
        yield Setting(path, type_name(field.annotation), shown(field.default), text)


def type_name(annotation: Any) -> str:
    """The type as a person writes it in a settings file."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0])
    if origin in (typing.Union, types.UnionType):
        named = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(str(a) for a in args)
    if origin in (list, tuple, set, frozenset):
        return "list of " + type_name(args[0]) if args else "list"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(str(m.value) for m in annotation)
    return _NAMES.get(annotation, getattr(annotation, "__name__", str(annotation)))


_NAMES: dict[Any, str] = {timedelta: "duration", str: "text", bool: "bool", int: "int",
                          float: "number", Path: "path"}


def shown(value: Any) -> str:
    """A default as it would be written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, timedelta):
        return durations.format_duration(value)
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, frozenset | set):
        return "[" + ", ".join(shown(v) for v in sorted(value, key=str)) + "]"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(shown(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {shown(v)}" for k, v in value.items()) + "}"
    return str(value)


def markdown(settings: tuple[Setting, ...]) -> str:
    """docs/settings.md: one table per section."""
    lines = [
        "# Settings reference",
        "",
        "Generated from `src/gpuguard/model/settings.py` by `gpuguard settings --markdown`",
        "(a test keeps it in sync: regenerate it after changing a setting). Set them in the",
        "settings file (`--config`, the Helm chart's `controller.settings`) or with",
        "`GPUGUARD_<SECTION>__<NAME>` variables. Durations need their unit (`90s`, `10m`).",
    ]
    section = None
    for s in settings:
        head = s.path.split(".")[0]
        if head != section:
            section = head
            lines += ["", f"## {head}", "", "| setting | type | default | what it does |",
                      "|---|---|---|---|"]
        lines.append(f"| `{s.path}` | {_cell(s.type)} | `{_cell(s.default)}` | {_cell(s.help)} |")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return re.sub(r"\|", r"\\|", text)
