"""The demo's view of declared change rollouts: each rollout's last plan as
``gpuguard demo --json`` prints it (``rollouts``), with when each wave started and ended and
the most nodes out for the change at once, and the rollout's writes on the guard timeline."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuguard.controller import change as change_step
from gpuguard.policy import rollout


@dataclass
class Watch:
    last: dict[str, dict[str, Any]] = field(default_factory=dict)
    started: dict[tuple[str, int], float] = field(default_factory=dict)
    finished: dict[tuple[str, int], float] = field(default_factory=dict)
    most_out: dict[str, int] = field(default_factory=dict)

    def saw(self, outcomes: Sequence[change_step.Outcome], t: float,
            timeline: list[dict[str, Any]]) -> None:
        for outcome, shown in zip(outcomes, change_step.as_json(outcomes), strict=True):
            self.last[outcome.name] = shown
            if outcome.plan is None:
                continue
            plan = outcome.plan
            self.most_out[plan.change] = max(self.most_out.get(plan.change, 0), plan.out)
            for wave in plan.waves:
                key = (plan.change, wave.index)
                if wave.nodes:
                    self.started.setdefault(key, t)
                if wave.result in ("passed", "failed"):
                    self.finished.setdefault(key, t)
            for action in plan.actions:
                if action.step in rollout.WRITES and outcome.done.get(action.node) == "applied":
                    timeline.append({"t": t, "kind": "change", "node": action.node,
                                     "reason": str(action.step),
                                     "detail": f"change {plan.change}: {action.reason}"})

    def report(self) -> list[dict[str, Any]]:
        out = []
        for name, shown in sorted(self.last.items()):
            waves = []
            for i, wave in enumerate(shown.get("waves", [])):
                start, end = self.started.get((name, i)), self.finished.get((name, i))
                took = end - start if start is not None and end is not None else None
                waves.append({**wave, "started_s": start, "finished_s": end, "took_s": took})
            out.append({**shown, "waves": waves, "max_out": self.most_out.get(name, 0)})
        return out
