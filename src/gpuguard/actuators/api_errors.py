"""lightkube's errors as gpuguard's, in one place: 409 → ConflictError (re-read, decide
again), 404 → NotFoundError, anything else from the API or the transport → the caller's
error type. Always chained, always naming the object."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx2
from lightkube import ApiError

from gpuguard.errors import ConflictError, GpuguardError, NotFoundError


def from_api_error(
    error: ApiError, what: str, fallback: type[GpuguardError] = GpuguardError
) -> GpuguardError:
    status = error.status
    code = status.code if status else None
    if code == 409:
        reason = (status.reason if status else None) or "Conflict"
        return ConflictError(f"{what}: {reason} (409): changed since it was read")
    if code == 404:
        return NotFoundError(f"{what}: not found (404)")
    return fallback(f"{what}: API error {code}: {status.message if status else ''}")


@contextlib.contextmanager
def translated(what: str, fallback: type[GpuguardError] = GpuguardError) -> Iterator[None]:
    try:
        yield
    except ApiError as e:
        raise from_api_error(e, what, fallback) from e
    except httpx2.HTTPError as e:
        raise fallback(f"{what}: {e}") from e
