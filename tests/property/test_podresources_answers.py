"""The kubelet's PodResources answer is outside input: any bytes decode to device uses or
raise DecodeError naming the message, and every answer the simulated kubelet encodes reads
back as itself."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuguard.agent import podresources
from gpuguard.sim import podresources as kubelet

NAME = st.text(min_size=0, max_size=12)
CONTAINER = st.tuples(NAME, NAME, NAME, NAME, st.lists(NAME, max_size=3).map(tuple))


@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_with_a_decode_error(data: bytes) -> None:
    try:
        podresources.decode_list(data)
    except podresources.DecodeError as e:
        said = str(e)
    else:
        return
    messages = {"ListPodResourcesResponse", "PodResources", "ContainerResources",
                "ContainerDevices"}
    assert said.partition(":")[0] in messages or " is not UTF-8" in said


@given(st.binary(max_size=40))
def test_any_body_unframes_or_fails_with_a_decode_error(body: bytes) -> None:
    try:
        message = podresources.unframe(body)
    except podresources.DecodeError:
        return
    assert len(message) <= len(body) - 5


@given(st.lists(CONTAINER, max_size=4))
def test_what_the_kubelet_encodes_reads_back(found: list[kubelet.Container]) -> None:
    uses = podresources.decode_list(kubelet.encode_list(found))
    assert [(u.namespace, u.pod, u.container, u.resource, u.device_ids) for u in uses] == found


def test_a_cut_message_is_refused() -> None:
    whole = kubelet.encode_list([("ns", "pod", "main", "nvidia.com/gpu", ("GPU-1",))])
    with pytest.raises(podresources.DecodeError, match="past the end"):
        podresources.decode_list(whole[:-3])
