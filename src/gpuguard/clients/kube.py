"""lightkube's errors as gpuguard's, in one place for every Kubernetes adapter (sources,
actuators, the Lease elector, the onboarding gate): 409 → ConflictError (re-read, decide
again), 404 → NotFoundError, anything else from the API, the transport or the decoding of an
object the API sent → the caller's error type. Always chained, always naming the object.

Modelled on kopf's ``check_response``: the adapters never catch a client library's
exception themselves, so a new failure mode is handled once, here.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx2
import msgspec
from lightkube import ApiError, Client, KubeConfig
from lightkube.config.kubeconfig import SingleConfig

from gpuguard.errors import ConflictError, GpuguardError, NotFoundError
from gpuguard.model import waits

# lightkube sends requests with httpx2 and decodes objects with msgspec: an object that does
# not fit its model (``leaseDurationSeconds: "fifteen"``) raises msgspec's ValidationError, an
# answer that is not JSON at all (a proxy's HTML login page) its parent DecodeError.
_NOT_API_ERRORS = (httpx2.HTTPError, msgspec.DecodeError)
# Everything a lightkube call raises about the call itself (the API's answer, the wire, the
# decoding), for a caller that keeps its own error and words (the agent's condition writer).
CALL_ERRORS: tuple[type[Exception], ...] = (ApiError, *_NOT_API_ERRORS)


def client(
    config: KubeConfig | SingleConfig | None, field_manager: str, timeout_s: float | None = None
) -> Client:
    """The one way gpuguard builds a lightkube client: ``config`` None is lightkube's own
    search (the pod's service account, ``$KUBECONFIG``, ``~/.kube/config``); every write it
    sends names ``field_manager``; ``timeout_s`` None keeps lightkube's default."""
    if timeout_s is None:
        return Client(config=config, field_manager=field_manager)
    return Client(config=config, field_manager=field_manager, timeout=timeout(timeout_s))


def timeout(
    seconds: float, *, connect: float | None = None, read: float | None = None
) -> httpx2.Timeout:
    """A lightkube client's or request's timeout: ``seconds`` for each phase (connect, read,
    write, pool) unless ``connect`` or ``read`` gives that one its own."""
    own = {"connect": connect, "read": read}
    return httpx2.Timeout(seconds, **{phase: s for phase, s in own.items() if s is not None})


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
    """Run the block; raise its lightkube, transport or decoding error as gpuguard's. The
    block's wait is named ``what`` (``model.waits``: a command's deadline names it)."""
    try:
        with waits.on(f"the Kubernetes API ({what})"):
            yield
    except ApiError as e:
        raise from_api_error(e, what, fallback) from e
    except _NOT_API_ERRORS as e:
        raise fallback(f"{what}: {transport_failure(e)}") from e


def transport_failure(error: Exception) -> str:
    """What went wrong on the wire, in words: a timeout says how long gpuguard waited."""
    if isinstance(error, httpx2.TimeoutException):
        waited = _timeout_of(error)
        limit = f" within {waited:g}s" if waited else ""
        return f"no answer{limit} ({type(error).__name__}): is the API server up and reachable?"
    return f"{type(error).__name__}: {error}"


def _timeout_of(error: httpx2.TimeoutException) -> float | None:
    """The limit that ran out, from the request's timeout extension (None if unknown)."""
    try:
        timeouts = error.request.extensions.get("timeout", {})
    except RuntimeError:  # raised before a request was attached
        return None
    kind = {"ConnectTimeout": "connect", "ReadTimeout": "read", "WriteTimeout": "write",
            "PoolTimeout": "pool"}.get(type(error).__name__, "read")
    value = timeouts.get(kind)
    return float(value) if value else None
