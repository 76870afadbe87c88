"""XML documents, read back by botocore's own response parser; defused request parsing."""

from __future__ import annotations

import functools
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.config import Config
from botocore.exceptions import ClientError
from hypothesis import given, settings
from hypothesis import strategies as st

from app.http.s3.errors import S3Error
from app.http.s3.xml.listings import (
    BucketEntry,
    ObjectEntry,
    PartEntry,
    UploadEntry,
    list_buckets_xml,
    list_multipart_uploads_xml,
    list_objects_v1_xml,
    list_objects_v2_xml,
    list_parts_xml,
)
from app.http.s3.xml.parsing import (
    MAX_DELETE_KEYS,
    parse_complete_multipart,
    parse_create_bucket_configuration,
    parse_delete_objects,
)
from app.http.s3.xml.responses import (
    DeleteError,
    complete_multipart_upload_xml,
    copy_object_xml,
    copy_part_xml,
    delete_result_xml,
    error_xml,
    initiate_multipart_upload_xml,
    location_constraint_xml,
    s3_error_xml,
    versioning_configuration_xml,
)
from app.http.s3.xml.writer import (
    S3_NAMESPACE,
    Owner,
    escape,
    iso8601,
)
from app.http.shared.conditions import http_date, parse_http_date
from tests.http.s3.helpers import ACCESS_KEY, ENDPOINT, SECRET_KEY, CapturingClient

_SESSION = boto3.session.Session()
WHEN = datetime(2026, 11, 30, 8, 0, 0, 123456, tzinfo=UTC)
ODD_KEYS = ["a b+c/ü", "x&y<z>'\"", "dir with space/", "tab\there", "plus+", "100%", "emoji😀"]


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self._body


# What the client below receives as the answer to its next call.
_ANSWER: dict[str, Any] = {}


@functools.cache
def _answering_client() -> Any:
    """One boto3 client for every test here (building one takes tens of
    milliseconds: a hypothesis test asking for one per example shrank a
    failure for minutes)."""
    client = _SESSION.client(
        "s3",
        endpoint_url=ENDPOINT,
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )

    def respond(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
        headers = {"Content-Type": "application/xml", "x-amz-request-id": "req-1"}
        return AWSResponse(request.url, _ANSWER["status"], headers, _Raw(_ANSWER["body"]))

    client.meta.events.register("before-send.s3", respond)
    return client


def answer(operation: str, body: bytes, status: int = 200, **params: Any) -> Any:
    """Call ``operation`` on a boto3 client that receives ``body`` as the response."""
    _ANSWER.update(body=body, status=status)
    return getattr(_answering_client(), operation)(**params)


def parse(document: bytes) -> ET.Element:
    assert document.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n')
    return ET.fromstring(document)


# ------------------------------------------------------------------------------------------- times


def test_dates() -> None:
    assert iso8601(WHEN) == "2026-11-30T08:00:00.123Z"
    assert iso8601(datetime(2026, 11, 30, 8)) == "2026-11-30T08:00:00.000Z"
    plus_two = datetime(2026, 11, 30, 10, 0, tzinfo=timezone(timedelta(hours=2)))
    assert iso8601(plus_two) == "2026-11-30T08:00:00.000Z"
    assert http_date(WHEN) == "Mon, 30 Nov 2026 08:00:00 GMT"
    assert parse_http_date("Mon, 30 Nov 2026 08:00:00 GMT") == WHEN.replace(microsecond=0)
    assert parse_http_date("not a date") is None


@settings(max_examples=500)
@given(
    when=st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from(
            [None, UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-9, minutes=-30))]
        ),
    )
)
def test_dates_are_utc_to_the_millisecond_cut_not_rounded(when: datetime) -> None:
    utc = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    expected = utc.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"
    assert iso8601(when) == expected


# -------------------------------------------------------------------- botocore reads our documents


def test_list_objects_v1_url_encoded_round_trip() -> None:
    contents = [
        ObjectEntry(key, WHEN, "9b2cf535f27731c974343645a3985328", i, owner=Owner("o", "O"))
        for i, key in enumerate(ODD_KEYS)
    ]
    document = list_objects_v1_xml(
        bucket="bucket",
        prefix="a b+",
        marker="m+ ü",
        max_keys=7,
        is_truncated=True,
        contents=contents,
        common_prefixes=["dir with space/", "p+q/"],
        delimiter="/",
        next_marker="emoji😀",
        encoding_type="url",
    )
    assert b"<Key>a%20b%2Bc/%C3%BC</Key>" in document
    response = answer("list_objects", document, Bucket="bucket")  # botocore asks for url
    assert [c["Key"] for c in response["Contents"]] == ODD_KEYS
    assert response["Contents"][0]["ETag"] == '"9b2cf535f27731c974343645a3985328"'
    assert response["Contents"][0]["LastModified"] == WHEN.replace(microsecond=123000)
    assert response["Contents"][2]["Size"] == 2
    assert [p["Prefix"] for p in response["CommonPrefixes"]] == ["dir with space/", "p+q/"]
    # botocore decodes <Prefix> for v2 only: v1 sends it as given (as AWS does).
    assert response["Prefix"] == "a b+"
    assert response["Marker"] == "m+ ü"
    assert response["NextMarker"] == "emoji😀"
    assert response["IsTruncated"] is True
    assert response["MaxKeys"] == 7


def test_list_objects_v1_plain_keys_escaped() -> None:
    keys = ["x&y<z>", "carriage\rreturn", "a b"]
    document = list_objects_v1_xml(
        bucket="b", contents=[ObjectEntry(k, WHEN, '"e"', 1) for k in keys]
    )
    root = parse(document)
    assert root.tag == f"{{{S3_NAMESPACE}}}ListBucketResult"
    found = [e.text for e in root.iter(f"{{{S3_NAMESPACE}}}Key")]
    assert found == keys
    assert root.find(f"{{{S3_NAMESPACE}}}NextMarker") is None
    assert root.find(f"{{{S3_NAMESPACE}}}Delimiter") is None
    assert escape("a\x01b") == "a&#x1;b"


def test_list_objects_v2_round_trip() -> None:
    document = list_objects_v2_xml(
        bucket="bucket",
        prefix="a b",
        max_keys=2,
        is_truncated=True,
        contents=[ObjectEntry("a b/1", WHEN, "e1", 10)],
        common_prefixes=["a b/dir/"],
        delimiter="/",
        continuation_token="tok+/=",
        next_continuation_token="next+/=",
        start_after="a b/0",
        encoding_type="url",
    )
    response = answer("list_objects_v2", document, Bucket="bucket")
    assert response["KeyCount"] == 2
    assert response["Contents"][0]["Key"] == "a b/1"
    assert response["CommonPrefixes"] == [{"Prefix": "a b/dir/"}]
    assert response["NextContinuationToken"] == "next+/="
    assert response["ContinuationToken"] == "tok+/="
    assert response["StartAfter"] == "a b/0"
    empty = answer("list_objects_v2", list_objects_v2_xml(bucket="bucket"), Bucket="bucket")
    assert empty["KeyCount"] == 0 and "Contents" not in empty


# Keys an XML 1.0 parser can read back: no surrogates (not UTF-8), and no
# control characters or U+FFFE/U+FFFF (written as character references, as
# AWS does, which expat refuses; test_list_objects_v1_plain_keys_escaped).
_KEY_TEXT = st.text(
    st.characters(blacklist_categories=["Cs", "Cc"], blacklist_characters="\ufffe\uffff"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            _KEY_TEXT,
            st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30)),
            st.integers(0, 2**62),
            st.booleans(),
        ),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from([None, "url"]),
)
def test_every_listed_key_size_date_and_owner_reads_back_through_botocore(
    entries: list[tuple[str, datetime, int, bool]], encoding_type: str | None
) -> None:
    """Each <Contents> is written as one string (element by element cost most
    of a 1,000-key listing): whatever the key, botocore reads back the key,
    the size, the date (to the millisecond) and the owner."""
    owner = Owner("id&<1>", "name > 'x'")
    contents = [
        ObjectEntry(key, when.replace(tzinfo=UTC), f"e{n}", size, owner=owner if owned else None)
        for n, (key, when, size, owned) in enumerate(entries)
    ]
    document = list_objects_v2_xml(bucket="bucket", contents=contents, encoding_type=encoding_type)
    listed = answer("list_objects_v2", document, Bucket="bucket")["Contents"]
    assert [item["Key"] for item in listed] == [key for key, *_ in entries]
    assert [item["Size"] for item in listed] == [size for _, _, size, _ in entries]
    assert [item["ETag"] for item in listed] == [f'"e{n}"' for n in range(len(entries))]
    for item, (_, when, _, owned) in zip(listed, entries, strict=True):
        assert item["LastModified"] == when.replace(
            microsecond=when.microsecond // 1000 * 1000, tzinfo=UTC
        )
        assert ("Owner" in item) == owned
        if owned:
            assert item["Owner"] == {"ID": "id&<1>", "DisplayName": "name > 'x'"}


def test_list_buckets() -> None:
    document = list_buckets_xml([BucketEntry("registry", WHEN), BucketEntry("gitea", WHEN)])
    response = answer("list_buckets", document)
    assert [b["Name"] for b in response["Buckets"]] == ["registry", "gitea"]
    assert response["Owner"]["ID"] == "teleuploader"


def test_multipart_documents() -> None:
    response = answer(
        "create_multipart_upload",
        initiate_multipart_upload_xml("bucket", "a b", "up-1"),
        Bucket="bucket",
        Key="a b",
    )
    assert (response["Bucket"], response["Key"], response["UploadId"]) == ("bucket", "a b", "up-1")

    response = answer(
        "complete_multipart_upload",
        complete_multipart_upload_xml("http://s3.test/bucket/k", "bucket", "k", "abc-3"),
        Bucket="bucket",
        Key="k",
        UploadId="up-1",
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": '"x"'}]},
    )
    assert response["ETag"] == '"abc-3"'
    assert response["Location"] == "http://s3.test/bucket/k"

    parts = [PartEntry(n, WHEN, f"etag{n}", 5 << 20) for n in (3, 4)]
    response = answer(
        "list_parts",
        list_parts_xml(
            bucket="bucket",
            key="k",
            upload_id="up-1",
            parts=parts,
            part_number_marker=2,
            max_parts=2,
            is_truncated=True,
        ),
        Bucket="bucket",
        Key="k",
        UploadId="up-1",
    )
    assert [p["PartNumber"] for p in response["Parts"]] == [3, 4]
    assert response["NextPartNumberMarker"] == 4
    assert response["PartNumberMarker"] == 2
    assert response["IsTruncated"] is True
    assert response["Parts"][0]["ETag"] == '"etag3"'

    uploads = [UploadEntry("docker/a b", "u1", WHEN), UploadEntry("docker/c", "u2", WHEN)]
    response = answer(
        "list_multipart_uploads",
        list_multipart_uploads_xml(
            bucket="bucket",
            uploads=uploads,
            prefix="docker/",
            is_truncated=True,
            max_uploads=2,
        ),
        Bucket="bucket",
        Prefix="docker/",
    )
    assert [u["Key"] for u in response["Uploads"]] == ["docker/a b", "docker/c"]
    assert response["NextKeyMarker"] == "docker/c"
    assert response["NextUploadIdMarker"] == "u2"
    assert response["Uploads"][0]["Initiated"] == WHEN.replace(microsecond=123000)
    # botocore does not decode an encoding-type=url multipart listing itself.
    encoded = list_multipart_uploads_xml(bucket="b", uploads=uploads, encoding_type="url")
    assert b"<Key>docker/a%20b</Key>" in encoded
    assert b"<EncodingType>url</EncodingType>" in encoded


def test_copy_documents() -> None:
    response = answer(
        "copy_object",
        copy_object_xml('"abc"', WHEN),
        Bucket="bucket",
        Key="k",
        CopySource="bucket/src",
    )
    assert response["CopyObjectResult"]["ETag"] == '"abc"'
    response = answer(
        "upload_part_copy",
        copy_part_xml("def", WHEN),
        Bucket="bucket",
        Key="k",
        CopySource="bucket/src",
        UploadId="u",
        PartNumber=1,
    )
    assert response["CopyPartResult"]["ETag"] == '"def"'


def test_delete_result() -> None:
    document = delete_result_xml(
        ["a b", "ü"], [DeleteError("locked", "AccessDenied", "Access Denied")]
    )
    response = answer(
        "delete_objects", document, Bucket="bucket", Delete={"Objects": [{"Key": "a b"}]}
    )
    assert [d["Key"] for d in response["Deleted"]] == ["a b", "ü"]
    assert response["Errors"] == [
        {"Key": "locked", "Code": "AccessDenied", "Message": "Access Denied"}
    ]
    quiet = parse(delete_result_xml(["a"], quiet=True))
    assert list(quiet) == []


def test_location_and_versioning() -> None:
    east = answer("get_bucket_location", location_constraint_xml(None), Bucket="bucket")
    assert east["LocationConstraint"] is None
    also_east = answer("get_bucket_location", location_constraint_xml("us-east-1"), Bucket="bucket")
    assert also_east["LocationConstraint"] is None
    eu = answer("get_bucket_location", location_constraint_xml("eu-west-1"), Bucket="bucket")
    assert eu["LocationConstraint"] == "eu-west-1"
    versioning = answer("get_bucket_versioning", versioning_configuration_xml(), Bucket="bucket")
    assert "Status" not in versioning
    root = parse(versioning_configuration_xml())
    assert root.tag == f"{{{S3_NAMESPACE}}}VersioningConfiguration" and len(root) == 0


def test_errors_as_botocore_sees_them() -> None:
    err = S3Error("NoSuchKey", resource="/bucket/a b")
    document = s3_error_xml(err, request_id="req-1")
    root = parse(document)
    assert root.tag == "Error"
    assert [child.tag for child in root] == ["Code", "Message", "Resource", "RequestId"]
    with pytest.raises(ClientError) as caught:
        answer("get_object", document, status=404, Bucket="bucket", Key="a b")
    assert caught.value.response["Error"]["Code"] == "NoSuchKey"
    assert caught.value.response["Error"]["Message"] == err.message

    wrong_region = S3Error(
        "AuthorizationHeaderMalformed", "wrong region", details={"Region": "eu-west-1"}
    )
    with pytest.raises(ClientError) as caught:
        answer("list_objects", s3_error_xml(wrong_region), status=400, Bucket="bucket")
    assert caught.value.response["Error"]["Region"] == "eu-west-1"
    raw = parse(error_xml("InternalError", "boom & <bust>", details=[("Extra", "1")]))
    assert raw.findtext("Message") == "boom & <bust>"
    assert raw.findtext("Extra") == "1"


# --------------------------------------------------------------------------------- request parsing


def test_parse_delete_objects_from_botocore(s3: CapturingClient) -> None:
    keys = [*ODD_KEYS, " leading and trailing ", "line\nfeed"]
    wire = s3.call(
        "delete_objects",
        Bucket="bucket",
        Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True},
    )
    quiet, parsed = parse_delete_objects(wire.body)
    assert quiet is True
    assert parsed == keys


def test_parse_delete_objects_variants() -> None:
    plain = b"<Delete><Object><Key>a</Key><VersionId>v</VersionId></Object></Delete>"
    assert parse_delete_objects(plain) == (False, ["a"])
    namespaced = (
        f'<Delete xmlns="{S3_NAMESPACE}"><Quiet>FALSE</Quiet>'
        "<Object><Key></Key></Object><Object><Key>&#13;x</Key></Object></Delete>"
    ).encode()
    assert parse_delete_objects(namespaced) == (False, ["", "\rx"])
    too_many = b"<Delete>" + b"<Object><Key>k</Key></Object>" * (MAX_DELETE_KEYS + 1) + b"</Delete>"
    bad = [
        b"",
        b"<Delete></Delete>",
        b"<Delete><Object></Object></Delete>",
        b"<Delete><Quiet>maybe</Quiet><Object><Key>a</Key></Object></Delete>",
        b"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>",
        b"<NotDelete><Object><Key>a</Key></Object></NotDelete>",
        b"<Delete><Object><Key>a</Key></Object>",
        b"not xml at all",
        too_many,
    ]
    for body in bad:
        with pytest.raises(S3Error) as caught:
            parse_delete_objects(body)
        assert caught.value.code in {"MalformedXML", "MissingRequestBodyError"}
    exactly = b"<Delete>" + b"<Object><Key>k</Key></Object>" * MAX_DELETE_KEYS + b"</Delete>"
    assert len(parse_delete_objects(exactly).keys) == MAX_DELETE_KEYS


BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol9 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
]>
<Delete><Object><Key>&lol9;</Key></Object></Delete>"""

EXTERNAL_ENTITY = b"""<?xml version="1.0"?>
<!DOCTYPE d [<!ENTITY x SYSTEM "file:///etc/passwd">]>
<Delete><Object><Key>&x;</Key></Object></Delete>"""

DTD_ONLY = b"""<?xml version="1.0"?>
<!DOCTYPE Delete SYSTEM "http://example.invalid/delete.dtd">
<Delete><Object><Key>a</Key></Object></Delete>"""


@pytest.mark.parametrize("body", [BILLION_LAUGHS, EXTERNAL_ENTITY, DTD_ONLY])
def test_entities_and_dtds_are_refused(body: bytes) -> None:
    for parser in (parse_delete_objects, parse_complete_multipart):
        with pytest.raises(S3Error) as caught:
            parser(body)
        assert caught.value.code == "MalformedXML"


def test_oversized_xml_is_refused() -> None:
    body = b"<Delete><Object><Key>" + b"k" * (3 * 1024 * 1024) + b"</Key></Object></Delete>"
    with pytest.raises(S3Error) as caught:
        parse_delete_objects(body)
    assert caught.value.code == "MalformedXML"


def test_parse_complete_multipart_from_botocore(s3: CapturingClient) -> None:
    wire = s3.call(
        "complete_multipart_upload",
        Bucket="bucket",
        Key="k",
        UploadId="u",
        MultipartUpload={
            "Parts": [
                {"PartNumber": 1, "ETag": '"5d41402abc4b2a76b9719d911017c592"'},
                {"PartNumber": 2, "ETag": "7d793037a0760186574b0282f2f435e7"},
                {"PartNumber": 10000, "ETag": '"x"', "ChecksumCRC32": "AAAAAA=="},
            ]
        },
    )
    assert parse_complete_multipart(wire.body) == [
        (1, "5d41402abc4b2a76b9719d911017c592"),
        (2, "7d793037a0760186574b0282f2f435e7"),
        (10000, "x"),
    ]


def test_parse_complete_multipart_errors() -> None:
    def doc(*parts: tuple[str, str]) -> bytes:
        inner = "".join(
            f"<Part><PartNumber>{n}</PartNumber><ETag>{e}</ETag></Part>" for n, e in parts
        )
        return f"<CompleteMultipartUpload>{inner}</CompleteMultipartUpload>".encode()

    assert parse_complete_multipart(doc(("1", "&quot;a&quot;")))[0].etag == "a"
    # Docker's registry 2.8 completes an empty blob with no part at all.
    assert parse_complete_multipart(doc()) == []
    cases = {
        doc(("2", "a"), ("1", "b")): "InvalidPartOrder",
        doc(("1", "a"), ("1", "b")): "InvalidPartOrder",
        doc(("0", "a")): "InvalidArgument",
        doc(("10001", "a")): "InvalidArgument",
        doc(("one", "a")): "MalformedXML",
        b"<CompleteMultipartUpload><Part><ETag>a</ETag></Part></CompleteMultipartUpload>": (
            "MalformedXML"
        ),
        b"": "MissingRequestBodyError",
    }
    for body, code in cases.items():
        with pytest.raises(S3Error) as caught:
            parse_complete_multipart(body)
        assert caught.value.code == code


def test_parse_create_bucket_configuration(s3: CapturingClient) -> None:
    wire = s3.call(
        "create_bucket",
        Bucket="bucket",
        CreateBucketConfiguration={"LocationConstraint": "eu-west-1"},
    )
    assert parse_create_bucket_configuration(wire.body) == "eu-west-1"
    assert parse_create_bucket_configuration(b"") is None
    empty = b"<CreateBucketConfiguration><LocationConstraint/></CreateBucketConfiguration>"
    assert parse_create_bucket_configuration(empty) is None
    with pytest.raises(S3Error):
        parse_create_bucket_configuration(b"<Other/>")
