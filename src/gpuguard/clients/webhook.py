"""One JSON POST to a URL that is neither Kubernetes nor Prometheus: a notification webhook,
Alertmanager's v2 API (``actuators.notify``). One client and one error, naming the URL, so
``clients`` stays the only package that speaks HTTP (the import contract in pyproject.toml)."""

from __future__ import annotations

from typing import Any, TypeAlias

import httpx

from gpuguard.errors import GpuguardError

Http: TypeAlias = httpx.Client
_SHOWN_BODY = 200


def http(timeout_s: float) -> Http:
    """A client whose every phase (connect, read, write, pool) waits at most ``timeout_s``."""
    return httpx.Client(timeout=timeout_s)


def post_json(client: Http, url: str, body: Any, what: str) -> None:
    """POST ``body`` as JSON; GpuguardError naming ``what`` and ``url`` when the request fails
    or the answer is not a success (2xx)."""
    try:
        response = client.post(url, json=body)
    except httpx.HTTPError as e:
        raise GpuguardError(f"{what} to {url} failed: {e}") from e
    if response.status_code >= 300:
        raise GpuguardError(
            f"{what} to {url}: HTTP {response.status_code} {response.text[:_SHOWN_BODY]}"
        )
