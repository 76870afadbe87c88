"""No request reaches a 5xx: the native API and the S3 API, in process, on
both databases, with hypothesis choosing headers, query strings and bodies
(the Telegram simulator is healthy, so no 5xx has an excuse)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy.ext.asyncio import AsyncEngine

from tests.db.helpers import Database
from tests.in_process import InProcess, in_process

ACCESS_KEY = "AKIDFUZZHTTP"
SECRET = "fuzz-http-secret-0123456789"
# No shrinking: through the whole app it takes minutes; the failing example is
# printed as found, and the server log has the traceback.
FUZZ = settings(
    max_examples=100,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

#: Values as an HTTP client can send them (latin-1, no CR/LF), leaning on the
#: characters that broke parsers before.
header_value = st.one_of(
    st.text(st.sampled_from(list('0123456789-=,;/ bytes*"²\xb9\xbdé\t')), max_size=30),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=60),
    st.just("9" * 5000),
)
query_value = st.one_of(
    st.text(st.sampled_from(list("0123456789-+_ ²٣\x00é")), max_size=25),
    st.text(max_size=40),
    st.just("9" * 5000),
)


@pytest.fixture
async def app(database: Database, engine: AsyncEngine) -> AsyncIterator[InProcess]:
    async with in_process(database, s3_credentials={ACCESS_KEY: SECRET}) as running:
        response = await running.client.put(
            "/api/files/seed.bin", content=b"s" * 3000, headers=running.auth
        )
        assert response.status_code == 201, response.text
        running.public_id = response.json()["public_id"]  # type: ignore[attr-defined]
        yield running


def no_5xx(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            ["range", "if-range", "if-none-match", "if-modified-since", "authorization"]
        ),
        header_value,
        max_size=3,
    ),
    st.sampled_from(["GET", "HEAD"]),
    st.booleans(),
)
async def test_native_downloads(
    app: InProcess, headers: dict[str, str], method: str, known: bool
) -> None:
    public_id = app.public_id if known else "x"  # type: ignore[attr-defined]
    response = await app.client.request(
        method,
        f"/f/{public_id}",
        headers={name: value.encode("latin-1") for name, value in headers.items()},
    )
    no_5xx(response)


@FUZZ
@given(
    query_value,
    st.dictionaries(st.sampled_from(["content-type", "content-length"]), header_value),
    st.binary(max_size=2000),
)
async def test_native_raw_uploads(
    app: InProcess, name: str, headers: dict[str, str], body: bytes
) -> None:
    sent = {**app.auth, **{n: v.encode("latin-1") for n, v in headers.items()}}
    response = await app.client.put(f"/api/files/{quote(name)}", content=body, headers=sent)
    no_5xx(response)


@FUZZ
@given(query_value, query_value, query_value, query_value)
async def test_native_listing_and_lookups(
    app: InProcess, limit: str, cursor: str, prefix: str, public_id: str
) -> None:
    listing = await app.client.get(
        "/api/files",
        params={"limit": limit, "cursor": cursor, "prefix": prefix},
        headers=app.auth,
    )
    info = await app.client.get(f"/file/{quote(public_id)}/info")
    deleted = await app.client.delete(f"/api/files/{quote(public_id)}", headers=app.auth)
    for response in (listing, info, deleted):
        no_5xx(response)


@FUZZ
@given(
    st.lists(
        st.tuples(
            query_value,
            st.one_of(st.none(), query_value),
            st.one_of(st.none(), header_value),
            st.binary(max_size=200),
        ),
        max_size=4,
    ),
    header_value,
)
async def test_native_forms(
    app: InProcess,
    parts: list[tuple[str, str | None, str | None, bytes]],
    boundary_suffix: str,
) -> None:
    boundary = "fz"
    body = b""
    for name, filename, content_type, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        body += f"--{boundary}\r\nContent-Disposition: {disposition}\r\n".encode()
        if content_type is not None:
            body += b"Content-Type: " + content_type.encode("latin-1") + b"\r\n"
        body += b"\r\n" + data + b"\r\n"
    body += f"--{boundary}--\r\n".encode()
    response = await app.client.post(
        "/api/upload",
        content=body,
        headers={
            **app.auth,
            "Content-Type": f"multipart/form-data; boundary={boundary}".encode()
            + boundary_suffix.encode("latin-1"),
        },
    )
    no_5xx(response)


# --- S3 -------------------------------------------------------------------------------

S3_QUERY_NAMES = st.sampled_from(
    [
        "max-keys",
        "max-uploads",
        "max-parts",
        "part-number-marker",
        "partNumber",
        "uploadId",
        "uploads",
        "prefix",
        "delimiter",
        "marker",
        "continuation-token",
        "start-after",
        "list-type",
        "encoding-type",
        "key-marker",
        "upload-id-marker",
        "delete",
        "location",
        "response-content-type",
        "attributes",
    ]
)
S3_HEADERS = st.sampled_from(
    [
        "range",
        "content-type",
        "content-md5",
        "x-amz-copy-source",
        "x-amz-copy-source-range",
        "x-amz-copy-source-if-match",
        "x-amz-metadata-directive",
        "x-amz-meta-a",
        "x-amz-checksum-crc32",
        "x-amz-checksum-crc64nvme",
        "if-match",
        "if-modified-since",
        "cache-control",
        "x-amz-object-attributes",
        "x-amz-max-parts",
        "x-amz-part-number-marker",
        "x-amz-checksum-algorithm",
        "x-amz-checksum-type",
        "x-amz-checksum-mode",
    ]
)
printable = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=40)


async def signed(
    app: InProcess, method: str, path: str, query: str, headers: dict[str, str], body: bytes
) -> httpx.Response:
    url = f"http://app{path}" + (f"?{query}" if query else "")
    request = AWSRequest(method=method, url=url, headers=headers, data=body)
    S3SigV4Auth(Credentials(ACCESS_KEY, SECRET), "s3", "us-east-1").add_auth(request)
    prepared = request.prepare()
    return await app.client.request(
        method, prepared.url, headers=dict(prepared.headers.items()), content=body
    )


@FUZZ
@given(
    st.sampled_from(["GET", "PUT", "POST", "DELETE", "HEAD"]),
    st.sampled_from(["/", "/box", "/box/k", "/box/dir/k", "/_native/named/seed.bin", "/api"]),
    st.dictionaries(S3_QUERY_NAMES, query_value, max_size=3),
    st.dictionaries(
        S3_HEADERS,
        st.one_of(printable, st.just("box/k"), st.just("_native/named/seed.bin")),
        max_size=3,
    ),
    st.one_of(
        st.binary(max_size=300),
        st.just(b"<Delete><Object><Key>k</Key></Object></Delete>"),
        st.just(
            b"<CompleteMultipartUpload><Part><PartNumber>\xc2\xb2</PartNumber>"
            b"<ETag>x</ETag></Part></CompleteMultipartUpload>"
        ),
        st.just(
            b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>x</ETag>"
            b"<ChecksumSHA256>!</ChecksumSHA256><ChecksumCRC32/></Part></CompleteMultipartUpload>"
        ),
    ),
)
async def test_s3_signed_requests(
    app: InProcess,
    method: str,
    path: str,
    query: dict[str, str],
    headers: dict[str, str],
    body: bytes,
) -> None:
    await signed(app, "PUT", "/box", "", {}, b"")
    await signed(app, "PUT", "/box/k", "", {}, b"object")
    encoded = "&".join(f"{quote(n)}={quote(v)}" for n, v in query.items())
    response = await signed(app, method, path, encoded, headers, body)
    no_5xx(response)


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "X-Amz-Algorithm",
                "X-Amz-Credential",
                "X-Amz-Date",
                "X-Amz-Expires",
                "X-Amz-SignedHeaders",
                "X-Amz-Signature",
            ]
        ),
        query_value,
        min_size=1,
    )
)
async def test_s3_presigned_queries_without_a_signature(
    app: InProcess, params: dict[str, str]
) -> None:
    base = {
        "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
        "X-Amz-Credential": f"{ACCESS_KEY}/20261130/us-east-1/s3/aws4_request",
        "X-Amz-Date": "20261130T080000Z",
        "X-Amz-Expires": "60",
        "X-Amz-SignedHeaders": "host",
        "X-Amz-Signature": "0" * 64,
    }
    query = "&".join(f"{n}={quote(v)}" for n, v in {**base, **params}.items())
    response = await app.client.get(f"/box/k?{query}")
    no_5xx(response)


# --- WebDAV ---------------------------------------------------------------------------

DAV_HEADERS = st.sampled_from(
    [
        "depth",
        "destination",
        "overwrite",
        "if",
        "lock-token",
        "timeout",
        "x-oc-mtime",
        "oc-checksum",
        "range",
        "if-match",
        "if-none-match",
        "content-type",
    ]
)
dav_header_value = st.one_of(
    header_value,
    st.sampled_from(
        [
            "0",
            "1",
            "infinity",
            "T",
            "F",
            "http://app/dav/b.txt",
            "/dav/folder/",
            '(<urn:uuid:x> ["e"]) (Not <DAV:no-lock>)',
            "</dav/seed.bin> (<urn:uuid:x>)",
            "<urn:uuid:x>",
            "Second-10, Infinite",
            "MD5:00",
        ]
    ),
)
dav_body = st.one_of(
    st.binary(max_size=300),
    st.sampled_from(
        [
            b'<propfind xmlns="DAV:"><prop><getetag/><x xmlns="urn:x"/></prop></propfind>',
            b'<propfind xmlns="DAV:"><allprop/></propfind>',
            b"<propertyupdate xmlns='DAV:'><set><prop><a xmlns='u'>v<b/></a></prop></set>"
            b"<remove><prop><getetag/></prop></remove></propertyupdate>",
            b'<lockinfo xmlns="DAV:"><lockscope><shared/></lockscope>'
            b"<locktype><write/></locktype><owner>o</owner></lockinfo>",
        ]
    ),
)


@FUZZ
@given(
    st.sampled_from(
        [
            "OPTIONS",
            "PROPFIND",
            "PROPPATCH",
            "MKCOL",
            "GET",
            "HEAD",
            "PUT",
            "DELETE",
            "COPY",
            "MOVE",
            "LOCK",
            "UNLOCK",
            "POST",
        ]
    ),
    st.one_of(
        st.sampled_from(["/dav", "/dav/", "/dav/seed.bin", "/dav/folder/", "/dav/folder/x"]),
        query_value.map(lambda text: "/dav/" + quote(text)),
    ),
    st.dictionaries(DAV_HEADERS, dav_header_value, max_size=4),
    dav_body,
)
async def test_webdav_requests(
    app: InProcess, method: str, path: str, headers: dict[str, str], body: bytes
) -> None:
    if not getattr(app, "dav_seeded", False):
        # Once: a fuzzed DELETE or MOVE may take them away, as a client could.
        await app.client.put("/dav/seed.bin", content=b"seed", headers=app.auth)
        await app.client.request("MKCOL", "/dav/folder/", headers=app.auth)
        app.dav_seeded = True  # type: ignore[attr-defined]
    sent = {**app.auth, **{name: value.encode("latin-1") for name, value in headers.items()}}
    response = await app.client.request(method, path, headers=sent, content=body)
    no_5xx(response)
