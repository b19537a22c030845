"""Power-cycle a node through its BMC with Redfish (``ComputerSystem.Reset``,
https://redfish.dmtf.org), using OpenStack's ``sushy`` client (docs/remediation.md).

The BMC's address and credentials come from a Secret named per node or per pool
(``remediation.bmc_secrets``; its shape in docs/remediation.md#the-bmc-secret). The power
cycle is ``PowerCycle`` when the system allows it, else ``ForceOff``, a wait (bounded by
``remediation.bmc_timeout``) for the power state ``Off``, then ``On``: never a soft reboot,
which hangs on a GPU gone from the bus (docs/design.md#incidents). sushy's own retries of
5xx answers are off: one try, and a refusal (401/403), an error (5xx), a missing system or a
timeout is returned as the reason, never raised and never retried (the controller ends in
the person's request).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightkube import Client
from lightkube.resources.core_v1 import Secret

from gpuguard.clients import kube as api_errors
from gpuguard.errors import GpuguardError, InputError
from gpuguard.model import ports

SecretReader = Callable[[str], Mapping[str, str]]
"""A Secret's name -> its decoded ``data`` (GpuguardError when it cannot be read)."""


@dataclass(frozen=True, slots=True)
class BmcCredentials:
    address: str  # https://bmc-host[:port]
    username: str
    password: str
    system: str | None  # the Redfish ComputerSystem's Id; None: the BMC's only one
    verify: bool  # TLS certificate checked (true unless the Secret says "false")

    @classmethod
    def of(cls, secret: str, data: Mapping[str, str]) -> BmcCredentials:
        missing = [k for k in ("address", "username", "password") if not data.get(k)]
        if missing:
            raise InputError(f"Secret {secret}: no {', '.join(missing)} (docs/remediation.md)")
        verify = data.get("verify", "true").strip().lower()
        if verify not in ("true", "false"):
            raise InputError(f"Secret {secret}: verify {verify!r} is neither true nor false")
        return cls(data["address"].strip(), data["username"], data["password"],
                   data.get("system") or None, verify == "true")  # fmt: skip


def secret_reader(client: Client, secrets_namespace: str) -> SecretReader:
    """Read one named Secret in gpuguard's namespace (the chart grants ``get`` on the names
    in ``remediation.bmc_secrets`` only: docs/security.md)."""

    def read(name: str) -> Mapping[str, str]:
        where = f"Secret {secrets_namespace}/{name}"
        with api_errors.translated(f"reading {where}"):
            secret = client.get(Secret, name, namespace=secrets_namespace)
        try:
            return {k: base64.b64decode(v).decode() for k, v in (secret.data or {}).items()}
        except (ValueError, UnicodeDecodeError) as e:
            raise InputError(f"{where}: a value is not base64 text") from e

    return read


@dataclass
class RedfishPower:
    """``ports.PowerControl`` through Redfish; ``secrets`` maps a node or a pool to its
    Secret's name (the node's own entry wins)."""

    read_secret: SecretReader
    secrets: Mapping[str, str]
    timeout_s: float = 60.0
    poll_s: float = 1.0

    def power_cycle(self, node: str, pool: str | None) -> ports.PowerCycled:
        # sushy is imported here, when a power cycle is due: importing it (with stevedore and
        # its plugins) costs every gpuguard command most of a second otherwise
        from sushy import exceptions as sushy_errors

        name = self.secrets.get(node) or (self.secrets.get(pool) if pool else None)
        if name is None:
            return ports.PowerCycled(False, f"no BMC Secret for node {node} or pool {pool} "
                                     "(remediation.bmc_secrets)")  # fmt: skip
        try:
            creds = BmcCredentials.of(name, self.read_secret(name))
        except GpuguardError as e:
            return ports.PowerCycled(False, f"BMC credentials unreadable: {e}")
        try:
            return ports.PowerCycled(True, self._cycle(creds))
        except sushy_errors.AccessError as e:
            return ports.PowerCycled(False, f"BMC {creds.address} refused ({e.status_code}): "
                                     f"{_short(e)}")  # fmt: skip
        except sushy_errors.HTTPError as e:
            return ports.PowerCycled(False, f"BMC {creds.address} answered {e.status_code}: "
                                     f"{_short(e)}")  # fmt: skip
        except sushy_errors.SushyError as e:
            return ports.PowerCycled(False, f"BMC {creds.address}: {_short(e)}")
        except _Timeout as e:
            return ports.PowerCycled(False, f"BMC {creds.address}: {e}")

    def _cycle(self, creds: BmcCredentials) -> str:
        import sushy

        root = sushy.Sushy(
            creds.address,
            auth=sushy.auth.BasicAuth(creds.username, creds.password),
            verify=creds.verify,
            server_side_retries=0,  # one try: a failed power cycle goes to a person
            read_timeout=self.timeout_s,
            connect_timeout=self.timeout_s,
        )
        system = (root.get_system(f"/redfish/v1/Systems/{creds.system}") if creds.system
                  else _only_system(root))  # fmt: skip
        before = _state(system.power_state)
        allowed = system.get_allowed_reset_system_values()
        if sushy.ResetType.POWER_CYCLE in allowed:
            system.reset_system(sushy.ResetType.POWER_CYCLE)
            return f"system {system.identity}: {before} -> PowerCycle"
        system.reset_system(sushy.ResetType.FORCE_OFF)
        deadline = time.monotonic() + self.timeout_s
        while True:
            system.refresh(force=True)
            if system.power_state == sushy.PowerState.OFF:
                break
            if time.monotonic() >= deadline:
                raise _Timeout(f"system {system.identity} still {_state(system.power_state)} "
                               f"{self.timeout_s:.0f}s after ForceOff")  # fmt: skip
            time.sleep(self.poll_s)
        system.reset_system(sushy.ResetType.ON)
        return f"system {system.identity}: {before} -> ForceOff -> Off -> On"


class _Timeout(Exception):
    """The power did not go off in time (internal: returned as the reason)."""


def _only_system(root: Any) -> Any:
    """The BMC's one ComputerSystem (a sushy ``System``); SushyError when it has several."""
    from sushy import exceptions as sushy_errors

    members = root.get_system_collection().get_members()
    if len(members) != 1:
        raise sushy_errors.SushyError(
            message=f"{len(members)} ComputerSystems: name one as `system` in the Secret")
    return members[0]


def _state(power_state: object) -> str:
    """A Redfish PowerState (sushy's enum, or None when the BMC did not say) as Redfish
    writes it."""
    return str(getattr(power_state, "value", power_state))


def _short(e: Exception) -> str:
    return " ".join(str(e).split())[:300]
