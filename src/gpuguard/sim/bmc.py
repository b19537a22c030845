"""The simulated nodes' BMCs for the scenarios: ``ports.PowerControl`` answered by the
simulator, as Redfish's ``ComputerSystem.Reset`` would (https://redfish.dmtf.org, Redfish
Resource and Schema Guide, ComputerSystem: ``ForceOff`` then ``On``, or ``PowerCycle``: the
system loses power and boots again). The product's own client (``actuators.redfish``, sushy)
is tested against a real Redfish emulator (sushy-tools) in tests/integration; in the
scenarios the controller gets this port instead and its code is the same.

Each node's BMC answers as its scenario says (``fleet.bmc`` / ``fleet.overrides.<node>.bmc``):
``answers`` (the node goes down, as the scenario event ``power_cycle``, and boots after the
world's power-cycle downtime), ``refuses`` (HTTP 401, the credentials were rotated) or
``times-out`` (no answer); the last two change nothing in the world. Every request is on the
world's timeline (``bmc``)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuguard.model import ports
from gpuguard.sim import reactions, scenario, world


@dataclass
class SimBmc:
    world: world.World
    timeout_s: float = 60.0

    def power_cycle(self, node: str, pool: str | None) -> ports.PowerCycled:
        sim = self.world.node(node)
        address = f"https://bmc-{node}.example.internal"
        match sim.bmc:
            case "refuses":
                done = ports.PowerCycled(False, f"BMC {address} refused (401): HTTP POST "
                                         f"{address}/redfish/v1/Systems/1/Actions/"
                                         "ComputerSystem.Reset returned code 401: Unauthorized")
            case "times-out":
                done = ports.PowerCycled(False, f"BMC {address}: Unable to connect to {address}"
                                         f"/redfish/v1/: Read timed out. (read timeout="
                                         f"{self.timeout_s:g})")
            case _:
                reactions.on_power_cycle(self.world, scenario.RestartPayload(node=node), sim)
                done = ports.PowerCycled(True, "system 1: On -> PowerCycle")
        self.world.record("bmc", node, ("" if done.ok else "failed: ") + done.detail)
        return done
