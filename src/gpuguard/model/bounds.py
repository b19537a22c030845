"""Bounds on what a person types: durations, names and URLs, checked once, the same way for
flags, arguments and settings.

A flag parser (``cli/inputs``) and the settings model both call these; each raises
``InputError`` (a ``ValueError``, so pydantic and typer report it against the field or flag)
saying what was expected. What they prevent: ``--step 0s`` (a division by zero),
``--timeout inf``, ``--interval 0s`` (a busy loop), a duration without its unit (seconds or
minutes?), an empty node name, or one with an ESC or 100,000 characters that would otherwise
reach the HTTP client as an invalid URL.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pydantic

from gpuguard.errors import InputError
from gpuguard.model import durations

LONGEST = timedelta(days=400)  # longer than any window, deadline or interval makes sense
NAME_MAX = 253  # a DNS subdomain, what Kubernetes accepts for a Node's name
LABEL_MAX = 63  # a DNS label: a namespace
URL_MAX = 2048  # what browsers and proxies reliably pass
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_HTTP_URL = pydantic.TypeAdapter(pydantic.AnyHttpUrl)
_BARE_NUMBER = re.compile(r"\s*[-+]?\d+(?:\.\d+)?\s*")


def duration(
    text: str, *, shortest: timedelta = timedelta(0), longest: timedelta = LONGEST
) -> timedelta:
    """``90s``/``10m``/``1h30m``, with its unit, longer than 0s, at least ``shortest`` and at
    most ``longest``."""
    if _BARE_NUMBER.fullmatch(text):
        raise InputError(f"{text!r} has no unit: write e.g. {text.strip()}s or {text.strip()}m")
    delta = durations.parse_duration(text, what=repr(text))
    if delta <= timedelta(0):
        raise InputError(f"{text!r}: must be longer than 0s")
    if delta < shortest:
        raise InputError(f"{text!r}: must be at least {durations.format_duration(shortest)}")
    if delta > longest:
        raise InputError(f"{text!r}: longer than {durations.format_duration(longest)}")
    return delta


def object_name(text: str) -> str:
    """A Kubernetes object name (a Node's): a DNS subdomain, lower case, at most 253."""
    return _name(text, _SUBDOMAIN, NAME_MAX, "a Kubernetes name like gpu-node-1", "'-' and '.'")


def namespace(text: str) -> str:
    """A namespace name: a DNS label, at most 63 characters."""
    return _name(text, _LABEL, LABEL_MAX, "a namespace name like gpuguard", "and '-'")


def _name(text: str, pattern: re.Pattern[str], longest: int, kind: str, marks: str) -> str:
    if not text:
        raise InputError(f"empty: expected {kind}")
    if len(text) > longest or not pattern.fullmatch(text):
        raise InputError(f"{_short(text)}: not {kind} (lower-case letters, digits, {marks}, "
                         f"at most {longest} characters)")
    return text


def http_url(text: str) -> str:
    """An http(s) URL with a host and a valid port, no spaces or control characters."""
    if any(ch.isspace() or not ch.isprintable() for ch in text):
        raise InputError(f"{_short(text)}: a URL has no spaces or control characters")
    if len(text) > URL_MAX:
        raise InputError(f"{_short(text)}: longer than {URL_MAX} characters")
    try:
        parsed = _HTTP_URL.validate_python(text)
    except pydantic.ValidationError as e:
        why = e.errors()[0]["msg"]
        raise InputError(f"{_short(text)}: not an http(s) URL ({why}); expected "
                         "http(s)://HOST[:PORT], e.g. http://127.0.0.1:9090") from e
    if parsed.port == 0:
        raise InputError(f"{_short(text)}: port 0 is not a port to connect to")
    return text


def _short(text: str) -> str:
    """The value as the message shows it: quoted, control characters visible, cut."""
    shown = repr(text)
    return shown if len(shown) <= 80 else f"{shown[:80]}… ({len(text)} chars)"
