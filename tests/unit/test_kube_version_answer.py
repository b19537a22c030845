"""Reading ``GET /version``'s answer: the gitVersion, or a SourceError that names /version and
says what came back (so the gate's fallback explains itself)."""

from __future__ import annotations

import json

import pytest

from gpuguard import errors
from gpuguard.sim import kubeapi
from gpuguard.sources import kubernetes

FORBIDDEN = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "reason": "Forbidden",
    "message": 'forbidden: User "system:anonymous" cannot get path "/version"',
    "code": 403,
}


def test_a_real_version_answer_gives_its_git_version() -> None:
    body = json.dumps(kubeapi.version_info("v1.34.3+rke2r1")).encode()
    assert kubernetes.git_version_from(200, body) == "v1.34.3+rke2r1"


@pytest.mark.parametrize(
    ("status_code", "content", "expected"),
    [
        pytest.param(
            403,
            json.dumps(FORBIDDEN).encode(),
            'answered 403: forbidden: User "system:anonymous"',
            id="no-rbac-for-version",
        ),
        pytest.param(
            502,
            b"Bad Gateway",
            "answered 502, not JSON: Bad Gateway",
            id="proxy-in-front-of-the-api-server-down",
        ),
        pytest.param(
            200,
            b"<html>login</html>",
            "answered 200, not JSON: <html>",
            id="rancher-login-page-instead-of-the-api",
        ),
        pytest.param(
            200,
            b'{"major": "1", "minor": "34"}',
            "answered no gitVersion",
            id="version-without-git-version",
        ),
        pytest.param(200, b'["v1.34.3"]', "answered no gitVersion", id="not-an-object"),
    ],
)
def test_an_unusable_version_answer_is_a_source_error_naming_version(
    status_code: int, content: bytes, expected: str
) -> None:
    with pytest.raises(errors.SourceError) as caught:
        kubernetes.git_version_from(status_code, content)
    assert str(caught.value).startswith("GET /version ")
    assert expected in str(caught.value)
