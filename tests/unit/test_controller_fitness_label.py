"""The opt-in gpuguard.io/fit-to-train label: yes for a serving node the guard has nothing
against, no for one it isolates or that lost a GPU; written only on a change, only when the
tick may write, and a failed write does not stop the others."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from gpuguard.controller import fitness_label
from gpuguard.errors import ConflictError
from gpuguard.model import annotation_keys, decisions, fleet

AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
KEY = annotation_keys.FIT_LABEL


@dataclass
class Marks:
    written: list[tuple[str, dict[str, str | None]]] = field(default_factory=list)
    refuse: frozenset[str] = frozenset()

    def mark(self, node: fleet.Node, annotations: dict[str, str | None],
             labels: dict[str, str | None]) -> None:
        if node.name in self.refuse:
            raise ConflictError(f"{node.name} changed")
        self.written.append((node.name, labels))


def node(name: str, allocatable: int = 8, label: str | None = None) -> fleet.Node:
    labels = {KEY: label} if label else {}
    return fleet.Node(name, "boot", 8, allocatable, conditions={"Ready": "True"}, labels=labels)


ISOLATE = decisions.Action(decisions.ActionKind.ISOLATE, "b", decisions.Reason.FAST_PATH)


def test_labels_follow_the_verdict_and_are_written_only_when_they_change() -> None:
    marks = Marks()
    step = fitness_label.FitnessLabel(marks)
    nodes = [node("a"), node("b"), node("c", allocatable=7), node("d", label="yes")]
    values = step.run(nodes, AT, [ISOLATE], [], may_write=lambda: True)
    assert values == {"a": "yes", "b": "no", "c": "no", "d": "yes"}
    assert marks.written == [("a", {KEY: "yes"}), ("b", {KEY: "no"}), ("c", {KEY: "no"})]


def test_nothing_is_written_when_the_tick_may_not_write() -> None:
    marks = Marks()
    fitness_label.FitnessLabel(marks).run([node("a")], AT, [], [], may_write=lambda: False)
    assert marks.written == []


def test_a_refused_write_is_retried_next_tick_and_the_others_still_go() -> None:
    marks = Marks(refuse=frozenset({"a"}))
    fitness_label.FitnessLabel(marks).run([node("a"), node("b")], AT, [], [],
                                          may_write=lambda: True)
    assert marks.written == [("b", {KEY: "yes"})]
