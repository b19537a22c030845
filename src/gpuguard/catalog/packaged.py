"""Reading gpuguard's packaged data files: one way to find them, one way to say what is wrong.

The catalog's JSON files (the Xid catalog, the Xid event rules, the GPU model table) are
generated, shipped in the wheel and validated on first use; a bad or unreadable one is a
``CatalogError`` naming the file and the first problem.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TypeVar

import pydantic

from gpuguard.errors import CatalogError

_Model = TypeVar("_Model", bound=pydantic.BaseModel)


def read_text(resource: str, what: str) -> str:
    """The text of ``resource`` (relative to ``gpuguard.catalog``); ``what`` names it in errors."""
    try:
        return resources.files("gpuguard.catalog").joinpath(resource).read_text(encoding="utf-8")
    except OSError as e:
        raise CatalogError(f"cannot read the packaged {what} {resource}: {e}") from e


def parse_json(text: str, model: type[_Model], *, source: str) -> _Model:
    """``text`` parsed as JSON and validated as ``model``; ``source`` names it in errors."""
    try:
        return model.model_validate(json.loads(text))
    except json.JSONDecodeError as e:
        raise CatalogError(f"{source}: not valid JSON: {e}") from e
    except pydantic.ValidationError as e:
        raise CatalogError(f"{source}: {first_problem(e)}") from e


def first_problem(error: pydantic.ValidationError) -> str:
    """Where and what the first validation problem is: ``entries[3].code: ...``."""
    problem = error.errors()[0]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in problem["loc"])
    return f"{where.lstrip('.') or 'top level'}: {problem['msg']}"
