"""The declared changes (ConfigMaps labelled ``gpuguard.io/change`` in gpuguard's namespace)
and kured's reboot lock, read through lightkube (docs/change-management.md).

A change whose declaration cannot be read is returned with its error, never skipped: the
controller reports it and starts nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightkube import Client
from lightkube.resources.apps_v1 import DaemonSet
from lightkube.resources.core_v1 import ConfigMap

from gpuguard.clients import kube as api_errors
from gpuguard.errors import InputError, NotFoundError, SourceError
from gpuguard.model import change
from gpuguard.model import metric_names as names
from gpuguard.sources import prometheus


@dataclass(frozen=True, slots=True)
class ConformancePlan:
    """The agents' current check statuses (the series the return checks read too)."""

    def queries(self) -> dict[str, str]:
        return {names.CHECK_STATUS: f"{names.CHECK_STATUS} == 1"} | prometheus.freshness_queries()


@dataclass(frozen=True, slots=True)
class Declared:
    """One change ConfigMap: its spec, or why it could not be read."""

    name: str
    spec: change.ChangeSpec | None
    error: str | None = None


def declared(name: str, data: dict[str, str]) -> Declared:
    """A ConfigMap's data as a change (the ``change.yaml`` and ``control`` keys)."""
    text = data.get(change.SPEC_KEY)
    if text is None:
        return Declared(name, None, f"change {name}: no {change.SPEC_KEY} key")
    try:
        return Declared(name, change.parse_spec(name, text, data.get(change.CONTROL_KEY)))
    except InputError as e:
        return Declared(name, None, str(e))


class ChangeReader:
    """Lists the change ConfigMaps in gpuguard's namespace."""

    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def changes(self) -> tuple[Declared, ...]:
        with api_errors.translated("listing the change ConfigMaps", SourceError):
            maps = list(self._client.list(ConfigMap, namespace=self._namespace,
                                          labels={change.CONFIGMAP_LABEL: None}))
        out = [declared(m.metadata.name or "?", dict(m.data or {}))
               for m in maps if m.metadata is not None]
        return tuple(sorted(out, key=lambda d: d.name))


class KuredLock:
    """kured's reboot lock: the lock annotation on kured's DaemonSet (``model.change.
    kured_holder`` reads it; a person's manual lock is the same annotation, see
    https://kured.dev/docs/operation/). None: no lock, or kured not installed."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def lock(self, kured_namespace: str, name: str) -> str | None:
        try:
            with api_errors.translated(f"reading DaemonSet {kured_namespace}/{name}", SourceError):
                ds = self._client.get(DaemonSet, name=name, namespace=kured_namespace)
        except NotFoundError:
            return None
        annotations = (ds.metadata.annotations if ds.metadata else None) or {}
        return annotations.get(change.KURED_LOCK)


class JobTemplates:
    """The cluster admin's approved change Job templates: one ConfigMap, read by name, in a
    namespace the admin owns (never one a change's author can write: the admission policy
    ``gpuguard-change-jobs`` admits only what it holds). Absent: no template."""

    def __init__(self, client: Client, location: str) -> None:
        self._client = client
        self._templates_namespace, _, self._name = location.partition("/")

    def templates(self) -> dict[str, str]:
        where = f"ConfigMap {self._templates_namespace}/{self._name}"
        try:
            with api_errors.translated(f"reading the change Job templates ({where})", SourceError):
                found = self._client.get(ConfigMap, name=self._name,
                                         namespace=self._templates_namespace)
        except NotFoundError:
            return {}
        return dict(found.data or {})
