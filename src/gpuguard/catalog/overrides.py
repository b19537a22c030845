"""A cluster's Xid class override file: how an operator changes what gpuguard does with a code.

Clusters differ (one treats NVLink privilege errors as the user's fault, another wants a
driver-reported code to count as hardware), so the packaged classes are only defaults. The
file is YAML with one key, ``classes``, mapping an Xid code (integer 1-1000; codes the
catalog does not list are allowed) to ``user``, ``hardware`` or ``informational``::

    # gpuguard Xid class overrides
    classes:
      94: hardware      # contained ECC counts as a hardware fault
      137: user         # NVLink privilege errors are the application's
    events:             # optional: one event rule's class, by rule id (catalog.events)
      "xid145:RLW_REMAP:0:0x00000001": hardware

An empty file means no overrides. Anything else -- an unreadable file, a YAML syntax error, a
top level that is not a mapping, an unknown key, a code that is not an integer in range, a
code listed twice, a class name gpuguard does not know -- is a CatalogError naming the file
and the offending entry.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Annotated, Any

import pydantic
import pydantic_core
import yaml

from gpuguard.errors import CatalogError, InputError
from gpuguard.model import input_files
from gpuguard.model import xid as xid_model

LOWEST_CODE = 1
HIGHEST_CODE = 1000


def _as_code(raw: object) -> int:
    code = _integer_or_none(raw)
    if code is None or not LOWEST_CODE <= code <= HIGHEST_CODE:
        raise ValueError(f"not an Xid code: expected an integer {LOWEST_CODE}-{HIGHEST_CODE}")
    return code


def _integer_or_none(raw: object) -> int | None:
    if isinstance(raw, str) and raw.strip().isdecimal():
        return int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    return None


XidCode = Annotated[int, pydantic.BeforeValidator(_as_code)]


class ClassOverrides(pydantic.BaseModel):
    """The override file's content."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    classes: dict[XidCode, xid_model.XidClass] = pydantic.Field(default_factory=dict)
    events: dict[str, xid_model.XidClass] = pydantic.Field(default_factory=dict)


class _DuplicateKeyRejectingLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key written twice (YAML would keep the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: set[Hashable] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, Hashable):
                continue  # the base class reports unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is listed twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_class_overrides(path: Path) -> Mapping[int, xid_model.XidClass]:
    """Read and validate an override file; the mapping is code -> class."""
    return read_overrides(path).classes


def read_overrides(path: Path) -> ClassOverrides:
    """Read and validate an override file: code classes and event-rule classes."""
    return parse_overrides(_read_text(path), source=str(path))


def parse_class_overrides(text: str, *, source: str) -> Mapping[int, xid_model.XidClass]:
    """Validate override YAML; ``source`` (usually the file path) names it in errors."""
    return parse_overrides(text, source=source).classes


def parse_overrides(text: str, *, source: str) -> ClassOverrides:
    """Validate override YAML, both keys; ``source`` names it in errors."""
    document = _load_yaml(text, source=source)
    if document is None:
        return ClassOverrides()
    if not isinstance(document, dict):
        raise CatalogError(
            f"{source}: top level must be a mapping with the key 'classes', "
            f"got {type(document).__name__}"
        )
    try:
        return ClassOverrides.model_validate(document)
    except pydantic.ValidationError as e:
        raise CatalogError(f"{source}: {_describe_problems(e)}") from e


def _read_text(path: Path) -> str:
    try:
        return input_files.read_text(path)
    except InputError as e:
        reason = str(e).removeprefix(f"{path}: ")
        raise CatalogError(f"{path}: cannot read the Xid override file: {reason}") from e


def _load_yaml(text: str, *, source: str) -> object:
    try:
        return yaml.load(text, Loader=_DuplicateKeyRejectingLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        raise CatalogError(f"{where}: invalid YAML: {e.problem or e.context}") from e
    except yaml.YAMLError as e:
        raise CatalogError(f"{source}: invalid YAML: {e}") from e


def _describe_problems(error: pydantic.ValidationError) -> str:
    return "; ".join(_describe_problem(p) for p in error.errors())


def _describe_problem(problem: pydantic_core.ErrorDetails) -> str:
    loc = tuple(problem["loc"])
    if len(loc) >= 2 and loc[0] == "classes":
        code = problem["input"] if loc[-1] == "[key]" else loc[1]
        return f"classes entry {code!r}: {_plain_message(problem)}"
    where = ".".join(str(p) for p in loc) or "top level"
    return f"{where}: {_plain_message(problem)}"


def _plain_message(problem: pydantic_core.ErrorDetails) -> str:
    if problem["type"] == "extra_forbidden":
        return "unknown key (the keys are 'classes' and 'events')"
    if problem["type"] == "dict_type":
        return "expected a mapping of Xid code to class, e.g. '94: hardware'"
    if problem["type"] == "enum":
        allowed = ", ".join(c.value for c in xid_model.XidClass)
        return f"unknown class {problem['input']!r} (expected one of: {allowed})"
    return str(problem["msg"]).removeprefix("Value error, ")
