"""The route table as a client meets it: each method and sub-resource reaches
its operation, a sub-resource this server lacks is NotImplemented (and does
nothing), and a method with no operation at that level is MethodNotAllowed
(real HTTP, both databases, the simulator)."""

from __future__ import annotations

import pytest

from app.http.s3.router import _CANDIDATES, ROUTES, UNSUPPORTED, Level
from tests.http.s3.test_api_boto3 import S3, read
from tests.http.s3.test_bad_input import error_code, s3, signed
from tests.running_service import Service

__all__ = ["s3"]  # the fixture, shared with test_bad_input


async def test_delete_of_an_object_sub_resource_keeps_the_object(
    s3: S3, s3_service: Service
) -> None:
    # DeleteObjectTagging once fell through to DeleteObject and deleted the
    # object; now it removes the tags, and a DELETE ?acl (no such operation)
    # is refused.
    await s3("put_object", Bucket="box", Key="kept", Body=b"still here")
    response = await signed(s3_service, "DELETE", "/box/kept?tagging")
    assert response.status_code == 204
    response = await signed(s3_service, "DELETE", "/box/kept?acl")
    assert (response.status_code, error_code(response)) == (405, "MethodNotAllowed")
    response = await signed(s3_service, "DELETE", "/box/kept?legal-hold")
    assert (response.status_code, error_code(response)) == (501, "NotImplemented")
    assert await read(s3, "box", "kept") == b"still here"


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/box?policy"),
        ("PUT", "/box?cors"),
        ("DELETE", "/box?lifecycle"),
        ("GET", "/box?tagging"),
        ("PUT", "/box/k?retention"),
        ("POST", "/box/k?torrent"),
    ],
)
async def test_unsupported_sub_resources_are_not_implemented(
    s3: S3, s3_service: Service, method: str, path: str
) -> None:
    response = await signed(s3_service, method, path)
    assert (response.status_code, error_code(response)) == (501, "NotImplemented")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/"),
        ("PUT", "/"),
        ("PATCH", "/box"),
        ("POST", "/box"),
        ("PATCH", "/box/k"),
        ("POST", "/box/k"),
        # A sub-resource served for other methods is not the plain
        # operation: none of these may delete the (empty) bucket.
        ("DELETE", "/box?versioning"),
        ("DELETE", "/box?location"),
        ("DELETE", "/box?uploads"),
        ("DELETE", "/box?versions"),
        ("DELETE", "/box?acl"),
    ],
)
async def test_a_method_without_an_operation_is_method_not_allowed(
    s3: S3, s3_service: Service, method: str, path: str
) -> None:
    response = await signed(s3_service, method, path)
    assert (response.status_code, error_code(response)) == (405, "MethodNotAllowed")
    # The bucket is untouched by any of them.
    await s3("head_bucket", Bucket="box")


async def test_a_sub_resource_is_served_only_for_the_methods_routed_to_it(
    s3: S3, s3_service: Service
) -> None:
    """GET ?attributes is GetObjectAttributes; PUT or DELETE ?attributes are
    not PutObject or DeleteObject."""
    await s3("put_object", Bucket="box", Key="k", Body=b"kept")
    for method in ("PUT", "DELETE", "POST"):
        response = await signed(s3_service, method, "/box/k?attributes")
        assert (response.status_code, error_code(response)) == (405, "MethodNotAllowed")
    assert await read(s3, "box", "k") == b"kept"
    attributes = await s3(
        "get_object_attributes", Bucket="box", Key="k", ObjectAttributes=["ObjectSize"]
    )
    assert attributes["ObjectSize"] == 4


def test_the_service_level_has_no_sub_resources() -> None:
    assert not UNSUPPORTED[Level.SERVICE]


def test_candidates_are_the_table_by_method_and_level_in_order() -> None:
    """The index the router looks up holds every route of the table under its
    method and level, in the table's order (first match wins)."""
    assert sum(len(routes) for routes in _CANDIDATES.values()) == len(ROUTES)
    for (method, level), routes in _CANDIDATES.items():
        assert routes == tuple(r for r in ROUTES if (r.method, r.level) == (method, level))
