"""ACLs as MinIO has them, through real boto3 against a running service: the
owner's FULL_CONTROL is the only grant there is, `private` is accepted, and
anything that would grant more is refused, saying so."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.http.s3.test_api_boto3 import ACCESS_KEY, S3, SECRET, code, read
from tests.running_service import Service

OWNER = {"ID": "teleuploader", "DisplayName": "teleuploader"}
OWNER_FULL_CONTROL = {
    "Grantee": {**OWNER, "Type": "CanonicalUser"},
    "Permission": "FULL_CONTROL",
}
EVERYONE_READ = {
    "Grantee": {"Type": "Group", "URI": "http://acs.amazonaws.com/groups/global/AllUsers"},
    "Permission": "READ",
}


@pytest.fixture
async def s3(s3_service: Service) -> S3:
    client = S3(s3_service)
    await client("create_bucket", Bucket="box")
    await client("put_object", Bucket="box", Key="k", Body=b"x")
    return client


def refused(error: ClientError) -> None:
    assert code(error) == "NotImplemented"
    assert error.response["ResponseMetadata"]["HTTPStatusCode"] == 501
    assert "'private'" in error.response["Error"]["Message"]


async def test_get_acls_answer_the_owner_with_full_control(s3: S3) -> None:
    for answer in (
        await s3("get_bucket_acl", Bucket="box"),
        await s3("get_object_acl", Bucket="box", Key="k"),
    ):
        assert answer["Owner"] == OWNER
        assert answer["Grants"] == [OWNER_FULL_CONTROL]
    assert code(await s3.error("get_object_acl", Bucket="box", Key="none")) == "NoSuchKey"
    assert code(await s3.error("get_bucket_acl", Bucket="nobox")) == "NoSuchBucket"


async def test_private_is_accepted_canned_or_as_a_policy(s3: S3) -> None:
    policy = {"Owner": OWNER, "Grants": [OWNER_FULL_CONTROL]}
    await s3("put_bucket_acl", Bucket="box", ACL="private")
    await s3("put_bucket_acl", Bucket="box", AccessControlPolicy=policy)
    await s3("put_object_acl", Bucket="box", Key="k", ACL="private")
    await s3("put_object_acl", Bucket="box", Key="k", AccessControlPolicy=policy)
    # What the current ACL says can be put back as it is (s3cmd, aws cli do).
    current = await s3("get_object_acl", Bucket="box", Key="k")
    await s3(
        "put_object_acl",
        Bucket="box",
        Key="k",
        AccessControlPolicy={"Owner": current["Owner"], "Grants": current["Grants"]},
    )
    await s3("put_object", Bucket="box", Key="p", Body=b"p", ACL="private")
    assert await read(s3, "box", "p") == b"p"
    assert code(await s3.error("put_object_acl", Bucket="box", Key="none", ACL="private")) == (
        "NoSuchKey"
    )


async def test_bucket_owner_full_control_means_private_here(s3: S3) -> None:
    """What tools send when copying objects: with one owner, the bucket's
    owner is the object's, so it is `private` and reads back as such."""
    await s3("put_bucket_acl", Bucket="box", ACL="bucket-owner-full-control")
    await s3("put_object_acl", Bucket="box", Key="k", ACL="bucket-owner-full-control")
    for answer in (
        await s3("get_bucket_acl", Bucket="box"),
        await s3("get_object_acl", Bucket="box", Key="k"),
    ):
        assert answer["Owner"] == OWNER
        assert answer["Grants"] == [OWNER_FULL_CONTROL]
    await s3(
        "copy_object",
        Bucket="box",
        Key="copied",
        CopySource={"Bucket": "box", "Key": "k"},
        ACL="bucket-owner-full-control",
    )
    assert await read(s3, "box", "copied") == b"x"


@pytest.mark.parametrize(
    "params",
    [
        {"ACL": "public-read"},
        {"ACL": "bucket-owner-read"},
        {"ACL": "authenticated-read"},
        {"GrantRead": 'uri="http://acs.amazonaws.com/groups/global/AllUsers"'},
        {"AccessControlPolicy": {"Owner": OWNER, "Grants": [OWNER_FULL_CONTROL, EVERYONE_READ]}},
        {"AccessControlPolicy": {"Owner": OWNER, "Grants": [EVERYONE_READ]}},
        {"AccessControlPolicy": {"Owner": OWNER, "Grants": []}},
    ],
    ids=[
        "public-read",
        "bucket-owner-read",
        "authenticated-read",
        "grant-header",
        "extra-grant",
        "other",
        "none",
    ],
)
async def test_anything_but_private_is_refused_clearly(s3: S3, params: dict[str, Any]) -> None:
    refused(await s3.error("put_bucket_acl", Bucket="box", **params))
    refused(await s3.error("put_object_acl", Bucket="box", Key="k", **params))
    assert (await s3("get_object_acl", Bucket="box", Key="k"))["Grants"] == [OWNER_FULL_CONTROL]


async def test_an_acl_asked_for_on_a_write_is_ignored_and_the_object_stays_private(
    s3: S3,
) -> None:
    """As MinIO: many clients send x-amz-acl with every upload; the upload
    works, and GetObjectAcl tells the truth (only the owner)."""
    await s3("put_object", Bucket="box", Key="pub", Body=b"x", ACL="public-read")
    await s3(
        "copy_object",
        Bucket="box",
        Key="copy",
        CopySource={"Bucket": "box", "Key": "k"},
        ACL="public-read",
    )
    upload = await s3("create_multipart_upload", Bucket="box", Key="mp", ACL="public-read-write")
    await s3("abort_multipart_upload", Bucket="box", Key="mp", UploadId=upload["UploadId"])
    for key in ("pub", "copy"):
        answer = await s3("get_object_acl", Bucket="box", Key=key)
        assert answer["Grants"] == [OWNER_FULL_CONTROL]
    async with s3.service.client() as http:
        anonymous = await http.get("/box/pub")
    assert anonymous.status_code == 403


@pytest.mark.parametrize("query", ["acl", "tagging"])
async def test_a_sub_resource_with_another_method_never_reaches_the_object(
    s3: S3, query: str
) -> None:
    # DELETE ?acl has no operation: it must not fall through to DeleteObject.
    method = "DELETE" if query == "acl" else "POST"
    url = f"{s3.service.url}/box/k?{query}"
    request = AWSRequest(method=method, url=url)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    async with s3.service.client() as http:
        answer = await http.request(method, url, headers=dict(request.headers.items()))
    assert answer.status_code == 405, answer.text
    assert "<Code>MethodNotAllowed</Code>" in answer.text
    assert await read(s3, "box", "k") == b"x"
