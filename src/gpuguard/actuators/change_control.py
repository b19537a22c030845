"""A person's control of a declared change: the ``control`` key of its ConfigMap (``run``,
``pause``, ``abort``), written with the person's own credentials by ``gpuguard change``.
gpuguard's controller never writes it (docs/change-management.md#who-writes-what)."""

from __future__ import annotations

from lightkube import Client
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from gpuguard.clients import kube as api_errors
from gpuguard.errors import InputError, NotFoundError
from gpuguard.model import change


class ChangeControl:
    def __init__(self, client: Client, namespace: str) -> None:
        self._client = client
        self._namespace = namespace

    def set(self, name: str, control: change.Control) -> None:
        """Merge-patch ``data.control``; InputError when no change of that name exists."""
        what = f"change {self._namespace}/{name}"
        try:
            with api_errors.translated(f"reading {what}"):
                cm = self._client.get(ConfigMap, name=name, namespace=self._namespace)
        except NotFoundError as e:
            raise InputError(f"{what}: no such change ConfigMap") from e
        labels = (cm.metadata.labels if cm.metadata else None) or {}
        if change.CONFIGMAP_LABEL not in labels:
            raise InputError(f"{what}: ConfigMap {name} is not labelled {change.CONFIGMAP_LABEL}")
        patch = {"data": {change.CONTROL_KEY: str(control)}}
        with api_errors.translated(f"writing {what}"):
            self._client.patch(ConfigMap, name, patch, namespace=self._namespace,
                               patch_type=PatchType.MERGE)
