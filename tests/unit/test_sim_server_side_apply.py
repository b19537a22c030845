"""Server-side apply in the simulator (``sim.server_side_apply``): what an applier owns, when
it conflicts, what it removes. Held to a real API server by
tests/realcluster/test_api_differential.py (``server_side_apply``)."""

from __future__ import annotations

import pytest

from gpuguard.sim import managed_fields, store

CONFIG = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
          "data": {"k": "v", "j": "w"}}  # fmt: skip


def applied(objects: store.ObjectStore, manager: str, data: dict[str, str],
            force: bool = False) -> store.Obj:
    return objects.apply("ConfigMap", "ns", "c", {**CONFIG, "data": data}, manager=manager,
                         force=force)[0]


def test_an_applier_owns_what_it_applied_and_a_forced_one_takes_it() -> None:
    objects = store.ObjectStore()
    applied(objects, "one", {"k": "v", "j": "w"})

    with pytest.raises(store.StoreApplyConflict) as refused:
        applied(objects, "two", {"k": "other"})
    taken = applied(objects, "two", {"k": "other"}, force=True)

    assert refused.value.causes == ({"reason": "FieldManagerConflict",
                                     "message": 'conflict with "one"', "field": ".data.k"},)
    assert managed_fields.owners(taken, ("data", "k")) == {"two"}
    assert managed_fields.owners(taken, ("data", "j")) == {"one"}


def test_the_same_value_is_shared_and_a_dropped_field_goes_unless_another_owns_it() -> None:
    objects = store.ObjectStore()
    applied(objects, "one", {"k": "v", "j": "w"})
    applied(objects, "two", {"k": "v"})  # the same value: no conflict, both own it

    after = applied(objects, "one", {})

    assert after["data"] == {"k": "v"}  # j went with its only owner; k stays with "two"
    assert managed_fields.owners(after, ("data", "k")) == {"two"}
