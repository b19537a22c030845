"""List paging (``?limit=N&continue=T``) as the Kubernetes API server does it.

A list with ``limit`` answers at most N items and, when more remain, ``metadata.continue``:
an opaque token for the next page, read from the *same* resourceVersion as the first page,
so objects created, changed or deleted meanwhile do not show
(https://kubernetes.io/docs/reference/using-api/api-concepts/#retrieving-large-results-sets-in-chunks).
The token is the real API server's: URL-safe base64 (no padding) of
``{"v":"meta.k8s.io/v1","rv":<resourceVersion>,"start":"<key after the last item>"}``, the key
relative to the list's prefix (``/name`` within a namespace or for a cluster-scoped kind,
``/namespace/name`` across namespaces: the watch cache's form, which serves paged lists since
1.34; the etcd store's, without the leading ``/``, is accepted too and is what a 410's
token carries) followed by ``\\x00`` (kubernetes
``staging/src/k8s.io/apiserver/pkg/storage/continue.go``: ``EncodeContinue``,
``DecodeContinue``, ``PrepareContinueToken``). ``rv`` -1 continues from the newest state (the
token a 410 carries: an inconsistent remainder).

Selectors filter within the page as etcd3's store does: a page holds up to N *matching*
items, and ``remainingItemCount`` is given only without a selector (it would count
non-matching objects). This module is pure: the store gives the snapshot, the server the I/O.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass

from gpuguard import errors
from gpuguard.sim import store

TOKEN_VERSION = "meta.k8s.io/v1"
INCONSISTENT = -1  # a token's rv meaning "continue from the newest state"
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can"
    " start a new list without the continue parameter, or use the continue token in this"
    " response to retrieve the remainder of the results. Continuing with the provided token"
    " results in an inconsistent list - objects that were created, modified, or deleted"
    " between the time the first chunk was returned and now may show up in the list."
)  # kubernetes apiserver storage/etcd3 ``handleCompactedErrorForPaging``

Key = tuple[str, str]  # (namespace, name) as the store sorts them


class TokenInvalid(errors.InputError):
    """A continue token that does not decode; the message is the API server's."""


@dataclass(frozen=True)
class Continue:
    """A decoded token: read at ``resource_version`` from ``start`` on."""

    resource_version: int
    start: Key


@dataclass(frozen=True)
class Page:
    """One page: its objects, the token for the next (``""`` at the end) and, without a
    selector, how many objects remain after it."""

    objects: list[store.Obj]
    continue_token: str
    remaining: int | None


def encode(start_key: Key, resource_version: int, across_namespaces: bool,
           *, rooted: bool = True) -> str:
    """The token to continue at ``start_key`` (the last key read and ``\\x00``: the next);
    ``rooted``: the key with the watch cache's leading ``/`` (False: etcd's, as in a 410)."""
    namespace, name = start_key
    start = f"{namespace}/{name}" if across_namespaces else name
    start = f"/{start}" if rooted else start
    body = {"v": TOKEN_VERSION, "rv": resource_version, "start": start}
    raw = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def decode(token: str, namespace: str | None, across_namespaces: bool) -> Continue:
    """The token's resourceVersion and start key; TokenInvalid with the API server's words
    (``continue key is not valid: ...``) for anything else."""
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError) as e:
        raise TokenInvalid(f"continue key is not valid: {e}") from e
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise TokenInvalid(f"continue key is not valid: {_json_error(raw, e)}") from e
    if not isinstance(body, dict) or body.get("v") != TOKEN_VERSION:
        version = body.get("v") if isinstance(body, dict) else body
        raise TokenInvalid(
            f"continue key is not valid: server does not recognize this encoded version {version}"
        )
    rv, start = body.get("rv"), body.get("start")
    if not isinstance(rv, int) or rv == 0:
        raise TokenInvalid("continue key is not valid: incorrect encoded start resourceVersion"
                           f" (version {TOKEN_VERSION})")
    if not isinstance(start, str) or not start:
        raise TokenInvalid(f"continue key is not valid: encoded start key empty"
                           f" (version {TOKEN_VERSION})")
    return Continue(rv, _start_key(start, namespace, across_namespaces))


def _json_error(raw: bytes, error: ValueError) -> str:
    """What Go's ``encoding/json`` says of a token that does not start as JSON (the API
    server's decoder: ``invalid character 'i' looking for beginning of value``)."""
    stripped = raw.lstrip(b" \t\r\n")
    if stripped and chr(stripped[0]) not in '{["-0123456789tfn':
        char = chr(stripped[0])
        quoted = f"'{char}'" if char.isprintable() else repr(char)
        return f"invalid character {quoted} looking for beginning of value"
    return str(error)


def _start_key(start: str, namespace: str | None, across_namespaces: bool) -> Key:
    rooted = "/" + start.lstrip("/")
    if posixpath.normpath(rooted) != rooted:  # the API server's path-traversal guard
        raise TokenInvalid(f"continue key is not valid: {start}")
    start = start.removeprefix("/")
    if not across_namespaces:
        return namespace or "", start
    ns, sep, name = start.partition("/")
    if not sep:
        raise TokenInvalid(f"continue key is not valid: {start}")
    return ns, name


def page(
    snapshot: store.Snapshot,
    start: Key | None,
    limit: int | None,
    matches: Callable[[store.Obj], bool] | None,
    *,
    across_namespaces: bool,
) -> Page:
    """The page of ``snapshot`` from ``start`` (None: the first) holding up to ``limit``
    objects that ``matches`` (None: no selector, every object; None limit: all). Costs what
    it reads, not the snapshot's size."""
    at = 0 if start is None else bisect.bisect_left(snapshot.keys, start)
    end = len(snapshot.keys)
    if matches is None:
        stop = end if limit is None else min(end, at + limit)
        taken = list(snapshot.objects[at:stop])
        at = stop
    else:
        taken = []
        while at < end and (limit is None or len(taken) < limit):
            obj = snapshot.objects[at]
            if matches(obj):
                taken.append(obj)
            at += 1
    if at >= end or limit is None:
        return Page(taken, "", None)
    token_rv = snapshot.resource_version
    namespace, name = snapshot.keys[at - 1]
    token = encode((namespace, name + "\x00"), token_rv, across_namespaces)
    return Page(taken, token, None if matches is not None else end - at)
