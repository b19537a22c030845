"""gpuguard's own exception hierarchy.

Adapters convert library errors (httpx, lightkube, OSError, YAML) into these, chained with
``raise X(...) from e``, so callers handle one vocabulary and every message names the input
that was bad.
"""

from __future__ import annotations


class GpuguardError(Exception):
    """Base of every error gpuguard raises on purpose."""


class InputError(GpuguardError, ValueError):
    """A file, flag, annotation or value given to gpuguard is malformed.

    The message names the input (file path, field path, entry index) and what was wrong.
    """


class CatalogError(InputError):
    """The packaged Xid catalog or a cluster's override file is invalid."""


class ScenarioError(InputError):
    """A simulator scenario file is invalid (names the file, event index and key)."""


class SourceError(GpuguardError):
    """A read adapter got no usable answer (error status, bad JSON, stale or partial data).

    Decision code treats this as "unknown": it never isolates and never returns a node.
    """


class ConflictError(GpuguardError):
    """A write lost a resourceVersion race (HTTP 409); re-read and decide again."""


class NotFoundError(GpuguardError):
    """The object a write or read targeted does not exist (HTTP 404)."""
