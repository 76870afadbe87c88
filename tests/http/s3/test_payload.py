"""Streaming body decoders: digests, checksums and aws-chunked framing."""

from __future__ import annotations

import base64
import hashlib
import zlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import google_crc32c
import pytest

from app.http.s3.aws_chunked import decode_aws_chunked, strip_aws_chunked
from app.http.s3.errors import S3Error
from app.http.s3.payload import request_body
from app.http.s3.payload_checks import (
    BodyResult,
    parse_content_md5,
    verify_checksum,
    verify_md5,
    verify_sha256,
)
from app.http.s3.sigv4 import PayloadMode, VerifiedRequest, verify_request
from app.kit.checksums import new_checksum
from tests.http.s3.helpers import (
    ENDPOINT,
    CapturingClient,
    boto3_client,
    collect,
    encode_signed_chunks,
    encode_unsigned_chunks,
    sign_with_botocore,
    stream_of,
)

# The example of https://docs.aws.amazon.com/AmazonS3/latest/API/sigv4-streaming.html
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
AWS_NOW = datetime(2013, 5, 24, 0, 0, 0, tzinfo=UTC)
AWS_DATA = b"a" * (65536 + 1024)
AWS_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
AWS_CHUNK_SIGNATURES = [
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
]
AWS_BODY = (
    f"10000;chunk-signature={AWS_CHUNK_SIGNATURES[0]}\r\n".encode()
    + b"a" * 65536
    + f"\r\n400;chunk-signature={AWS_CHUNK_SIGNATURES[1]}\r\n".encode()
    + b"a" * 1024
    + f"\r\n0;chunk-signature={AWS_CHUNK_SIGNATURES[2]}\r\n\r\n".encode()
)
# The trailer variant (sigv4-streaming-trailers.html).
AWS_TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
AWS_TRAILER_CHUNK_SIGNATURES = [
    "b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
    "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
    "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992",
]
AWS_TRAILER_SIGNATURE = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
AWS_TRAILER_BODY = (
    f"10000;chunk-signature={AWS_TRAILER_CHUNK_SIGNATURES[0]}\r\n".encode()
    + b"a" * 65536
    + f"\r\n400;chunk-signature={AWS_TRAILER_CHUNK_SIGNATURES[1]}\r\n".encode()
    + b"a" * 1024
    + f"\r\n0;chunk-signature={AWS_TRAILER_CHUNK_SIGNATURES[2]}\r\n".encode()
    + b"x-amz-checksum-crc32c:sOO8/Q==\r\n"
    + f"x-amz-trailer-signature:{AWS_TRAILER_SIGNATURE}\r\n".encode()
    + b"\r\n"
)


def aws_example_request(trailer: bool = False) -> VerifiedRequest:
    headers = {
        "Host": "s3.amazonaws.com",
        "x-amz-date": "20130524T000000Z",
        "x-amz-storage-class": "REDUCED_REDUNDANCY",
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": "66560",
        "Content-Length": "66824",
    }
    signed = "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
    signed += "x-amz-decoded-content-length;x-amz-storage-class"
    seed = AWS_SEED
    if trailer:
        headers["x-amz-content-sha256"] = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
        headers["x-amz-trailer"] = "x-amz-checksum-crc32c"
        signed = signed.replace("encoding;content-length;", "encoding;") + ";x-amz-trailer"
        seed = AWS_TRAILER_SEED
    headers["Authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={AWS_KEY}/20130524/us-east-1/s3/aws4_request,"
        f"SignedHeaders={signed},Signature={seed}"
    )
    return verify_request(
        "PUT",
        b"/examplebucket/chunkObject.txt",
        b"",
        headers,
        {AWS_KEY: AWS_SECRET},
        now=AWS_NOW,
    )


async def decode(
    body: bytes,
    verified: VerifiedRequest,
    piece: int = 65536,
    result: BodyResult | None = None,
) -> bytes:
    return await collect(
        decode_aws_chunked(
            stream_of(body, piece),
            signed=verified if verified.chunks_signed else None,
            decoded_length=verified.decoded_content_length,
            trailer=verified.has_trailer,
            declared_trailers=verified.declared_trailers,
            result=result,
        )
    )


async def expect_stream_error(code: str, stream: AsyncIterator[bytes]) -> S3Error:
    with pytest.raises(S3Error) as caught:
        await collect(stream)
    assert caught.value.code == code, caught.value.message
    return caught.value


# ----------------------------------------------------------------------- AWS documentation vectors


def test_aws_example_seed_signature_reproduced() -> None:
    verified = aws_example_request()
    assert verified.payload_mode is PayloadMode.STREAMING_SIGNED
    assert verified.seed_signature == AWS_SEED
    assert verified.decoded_content_length == 66560


def test_our_encoder_reproduces_the_aws_chunk_signatures() -> None:
    verified = aws_example_request()
    body, signatures = encode_signed_chunks(
        AWS_DATA,
        chunk_size=65536,
        seed=AWS_SEED,
        key=verified.signing_key,
        amz_date=verified.amz_date,
        scope=verified.scope,
    )
    assert signatures == AWS_CHUNK_SIGNATURES
    assert body == AWS_BODY


@pytest.mark.parametrize("piece", [1, 7, 86, 777, 65536, 65537, 1 << 20])
async def test_aws_example_body_decodes_in_any_pieces(piece: int) -> None:
    result = BodyResult()
    assert await decode(AWS_BODY, aws_example_request(), piece, result) == AWS_DATA
    assert result.size == len(AWS_DATA)


async def test_aws_trailer_example() -> None:
    verified = aws_example_request(trailer=True)
    assert verified.seed_signature == AWS_TRAILER_SEED
    assert verified.payload_mode is PayloadMode.STREAMING_SIGNED_TRAILER
    assert verified.declared_trailers == ("x-amz-checksum-crc32c",)
    for piece in (3, 1000, 1 << 20):
        result = BodyResult()
        assert await decode(AWS_TRAILER_BODY, verified, piece, result) == AWS_DATA
        assert result.trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}
        assert result.checksums == {"crc32c": "sOO8/Q=="}
    # The trailer value is covered by the trailer signature.
    forged = AWS_TRAILER_BODY.replace(b"sOO8/Q==", b"sOO8/A==")
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(forged, verified))


def _decode_stream(
    body: bytes, verified: VerifiedRequest, piece: int = 4096
) -> AsyncIterator[bytes]:
    return decode_aws_chunked(
        stream_of(body, piece),
        signed=verified if verified.chunks_signed else None,
        decoded_length=verified.decoded_content_length,
        trailer=verified.has_trailer,
        declared_trailers=verified.declared_trailers,
    )


async def test_aws_example_tampering() -> None:
    verified = aws_example_request()
    data_changed = AWS_BODY.replace(b"a" * 10, b"a" * 9 + b"b", 1)
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(data_changed, verified))
    sig_changed = AWS_BODY.replace(AWS_CHUNK_SIGNATURES[1].encode(), b"0" * 64)
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(sig_changed, verified))
    final_changed = AWS_BODY.replace(AWS_CHUNK_SIGNATURES[2].encode(), b"f" * 64)
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(final_changed, verified))
    # Chunks replayed in another order break the chain.
    first = AWS_BODY.index(b"400;")
    last = AWS_BODY.index(b"0;chunk-signature=" + AWS_CHUNK_SIGNATURES[2].encode())
    swapped = AWS_BODY[first:last] + AWS_BODY[:first] + AWS_BODY[last:]
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(swapped, verified))
    # Cut short.
    await expect_stream_error("IncompleteBody", _decode_stream(AWS_BODY[:60000], verified))
    await expect_stream_error("IncompleteBody", _decode_stream(AWS_BODY[:20], verified))
    # Without the final zero-size chunk.
    await expect_stream_error("IncompleteBody", _decode_stream(AWS_BODY[:last], verified))


async def test_data_is_streamed_before_the_chunk_is_verified() -> None:
    """The decoder yields data as it arrives; the failure comes at the chunk's end."""
    verified = aws_example_request()
    body = AWS_BODY.replace(AWS_CHUNK_SIGNATURES[0].encode(), b"0" * 64)
    stream = _decode_stream(body, verified, piece=1024)
    first = await stream.__anext__()
    assert first == b"a" * (1024 - len(f"10000;chunk-signature={'0' * 64}\r\n"))
    with pytest.raises(S3Error):
        while True:
            await stream.__anext__()


async def test_pieces_never_exceed_what_arrived() -> None:
    verified = aws_example_request()
    sizes: list[int] = []
    async for piece in _decode_stream(AWS_BODY, verified, piece=8192):
        sizes.append(len(piece))
    assert max(sizes) <= 8192
    assert sum(sizes) == len(AWS_DATA)


# --------------------------------------------------------------------------- our own signed bodies


def signed_request(
    frozen_payload: str,
    decoded_length: int | None,
    trailer: str | None = None,
) -> VerifiedRequest:
    headers = [("Content-Encoding", "aws-chunked")]
    if decoded_length is not None:
        headers.append(("x-amz-decoded-content-length", str(decoded_length)))
    if trailer is not None:
        headers.append(("x-amz-trailer", trailer))
    wire = sign_with_botocore(
        "PUT", f"{ENDPOINT}/bucket/big blob", headers=headers, payload=frozen_payload
    )
    return wire.verify()


def encode_for(
    verified: VerifiedRequest,
    data: bytes,
    chunk_size: int,
    trailers: list[tuple[str, str]] | None = None,
    trailer_line_end: bytes = b"\r\n",
) -> bytes:
    body, _ = encode_signed_chunks(
        data,
        chunk_size=chunk_size,
        seed=verified.seed_signature,
        key=verified.signing_key,
        amz_date=verified.amz_date,
        scope=verified.scope,
        trailers=trailers,
        trailer_line_end=trailer_line_end,
    )
    return body


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def crc32_b64(data: bytes) -> str:
    return b64(zlib.crc32(data).to_bytes(4, "big"))


def crc32c_b64(data: bytes) -> str:
    return b64(int(google_crc32c.value(data)).to_bytes(4, "big"))


async def test_botocore_seeded_multi_mib_body(frozen: None) -> None:
    data = bytes(range(256)) * (3 * 4096 + 17)  # a little over 3 MiB
    verified = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", len(data))
    body = encode_for(verified, data, chunk_size=1 << 20)
    sizes: list[int] = []
    out = bytearray()
    async for piece in _decode_stream(body, verified, piece=65536):
        sizes.append(len(piece))
        out += piece
    assert bytes(out) == data
    assert max(sizes) <= 65536  # a 1 MiB chunk is never held whole


async def test_small_chunks_and_empty_body(frozen: None) -> None:
    data = b"0123456789" * 100
    verified = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", len(data))
    assert await decode(encode_for(verified, data, chunk_size=7), verified, piece=13) == data
    empty = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 0)
    assert await decode(encode_for(empty, b"", chunk_size=8), empty) == b""


async def test_decoded_length_mismatch(frozen: None) -> None:
    data = b"x" * 5000
    longer = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 4999)
    await expect_stream_error(
        "InvalidRequest", _decode_stream(encode_for(longer, data, 1000), longer)
    )
    shorter = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", 5001)
    await expect_stream_error(
        "IncompleteBody", _decode_stream(encode_for(shorter, data, 1000), shorter)
    )
    unknown = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", None)
    assert await decode(encode_for(unknown, data, 1000), unknown) == data


async def test_signed_trailer_minio_go_style(frozen: None) -> None:
    # minio-go ends trailer lines with a bare LF, then CRLF, then the signature.
    data = b"gitea blob " * 9000
    verified = signed_request(
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", len(data), trailer="x-amz-checksum-crc32c"
    )
    for line_end in (b"\n", b"\r\n"):
        trailers = [("x-amz-checksum-crc32c", crc32c_b64(data))]
        body = encode_for(verified, data, 65536, trailers, trailer_line_end=line_end)
        result = BodyResult()
        assert await decode(body, verified, piece=5000, result=result) == data
        assert result.checksums == {"crc32c": crc32c_b64(data)}
    # A wrong checksum that is properly signed: BadDigest.
    body = encode_for(verified, data, 65536, [("x-amz-checksum-crc32c", crc32c_b64(b"x"))])
    await expect_stream_error("BadDigest", _decode_stream(body, verified))
    # A trailer signature is required when chunks are signed.
    body = encode_for(verified, data, 65536, [("x-amz-checksum-crc32c", crc32c_b64(data))])
    unsigned_trailer = body[: body.index(b"x-amz-trailer-signature")]
    await expect_stream_error("SignatureDoesNotMatch", _decode_stream(unsigned_trailer, verified))


async def test_trailer_declarations(frozen: None) -> None:
    data = b"z" * 100
    verified = signed_request(
        "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER", len(data), trailer="x-amz-checksum-crc32"
    )
    other = encode_for(
        verified, data, 64, [("x-amz-checksum-sha256", b64(hashlib.sha256(data).digest()))]
    )
    await expect_stream_error("InvalidRequest", _decode_stream(other, verified))
    none = encode_for(verified, data, 64, [])
    await expect_stream_error("InvalidRequest", _decode_stream(none, verified))
    bad_value = encode_for(verified, data, 64, [("x-amz-checksum-crc32", "not base64!")])
    await expect_stream_error("InvalidRequest", _decode_stream(bad_value, verified))


async def test_malformed_framing(frozen: None) -> None:
    data = b"q" * 300
    verified = signed_request("STREAMING-AWS4-HMAC-SHA256-PAYLOAD", len(data))
    body = encode_for(verified, data, 100)
    cases = [
        body.replace(b"64;chunk-signature=", b"6g;chunk-signature=", 1),
        body.replace(b"64;chunk-signature=", b"64;chunk-signatur=", 1),
        body.replace(b"\r\n", b"\n", 1),
        b"64;chunk-signature=" + b"a" * 5000 + b"\r\n",
        body[: body.index(b"\r\n", 110)] + b"XX" + body[body.index(b"\r\n", 110) + 2 :],
        body + b"garbage after the end",
        body.replace(b"64;chunk-signature=", b"64;chunk-signature=abc\r\n", 1),
        b"10000000000000000;chunk-signature=" + b"0" * 64 + b"\r\n",
        # Not ASCII: the signature comparison must never see it.
        body.replace(body[body.index(b"=") + 1 : body.index(b"=") + 65], "é".encode() * 32, 1),
        body.replace(body[body.index(b"=") + 1 : body.index(b"=") + 65], b"\xff" * 64, 1),
    ]
    for case in cases:
        with pytest.raises(S3Error) as caught:
            await decode(case, verified, piece=37)
        assert caught.value.code in {"InvalidRequest", "SignatureDoesNotMatch", "IncompleteBody"}
        assert caught.value.code != "IncompleteBody" or case is cases[3]


# -------------------------------------------------------------------- unsigned trailers (botocore)


async def test_botocore_https_put_object_unsigned_trailer(frozen: None) -> None:
    client: CapturingClient = boto3_client(endpoint="https://s3.test", signature_version="s3v4")
    data = b"layer " * 50000
    wire = client.call("put_object", Bucket="bucket", Key="blob", Body=data)
    assert wire.header("x-amz-content-sha256") == "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
    assert wire.header("content-encoding") == "aws-chunked"
    assert wire.header("x-amz-trailer") == "x-amz-checksum-crc32"
    verified = wire.verify()
    assert verified.payload_mode is PayloadMode.STREAMING_UNSIGNED_TRAILER
    assert verified.decoded_content_length == len(data)
    for piece in (1, 1000, 1 << 20):
        result = BodyResult()
        out = await collect(
            request_body(stream_of(wire.body, piece), verified, wire.headers, result=result)
        )
        assert out == data
        assert result.checksums == {"crc32": crc32_b64(data)}
        assert result.trailers == {"x-amz-checksum-crc32": crc32_b64(data)}
        assert result.size == len(data)
    corrupted = wire.body.replace(b"layer", b"lAyer", 1)
    await expect_stream_error(
        "BadDigest", request_body(stream_of(corrupted), verified, wire.headers)
    )


async def test_minio_go_style_unsigned_trailer(frozen: None) -> None:
    data = b"m" * 200000
    wire = sign_with_botocore(
        "PUT",
        f"{ENDPOINT}/bucket/key",
        payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        headers=[
            ("Content-Encoding", "aws-chunked"),
            ("x-amz-decoded-content-length", str(len(data))),
            ("x-amz-trailer", "x-amz-checksum-crc32c"),
        ],
    )
    verified = wire.verify()
    # minio-go: "<hex>\r\n" chunks, trailer line ending in a bare LF, then CRLF CRLF.
    body = encode_unsigned_chunks(
        data,
        chunk_size=65536,
        trailers=[("x-amz-checksum-crc32c", crc32c_b64(data))],
        line_end=b"\n",
    )
    body += b"\r\n"
    result = BodyResult()
    assert await decode(body, verified, piece=4096, result=result) == data
    assert result.checksums == {"crc32c": crc32c_b64(data)}
    # Unsigned chunks may carry (ignored) extensions.
    with_ext = body.replace(b"10000\r\n", b"10000;chunk-signature=" + b"0" * 64 + b"\r\n")
    assert await decode(with_ext, verified) == data


def crc64nvme_reference(data: bytes) -> bytes:
    """CRC-64/NVME bit by bit, straight from its definition (reflected
    polynomial 0x9A6C9329AC4BC9B5, init and xorout all ones): slow, obvious,
    and independent of the implementation under test."""
    crc = 0xFFFFFFFFFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x9A6C9329AC4BC9B5 if crc & 1 else 0)
    return (crc ^ 0xFFFFFFFFFFFFFFFF).to_bytes(8, "big")


async def test_crc64nvme_trailer_is_verified(frozen: None) -> None:
    data = b"n" * 10
    wire = sign_with_botocore(
        "PUT",
        f"{ENDPOINT}/bucket/key",
        payload="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
        headers=[("x-amz-trailer", "x-amz-checksum-crc64nvme")],
    )
    verified = wire.verify()
    good = b64(crc64nvme_reference(data))
    body = encode_unsigned_chunks(data, chunk_size=4, trailers=[("x-amz-checksum-crc64nvme", good)])
    result = BodyResult()
    assert await decode(body, verified, result=result) == data
    assert result.checksums == {"crc64nvme": good}
    assert result.unverified == {}

    wrong = encode_unsigned_chunks(
        data, chunk_size=4, trailers=[("x-amz-checksum-crc64nvme", b64(b"\x01" * 8))]
    )
    await expect_stream_error("BadDigest", _decode_stream(wrong, verified))


# -------------------------------------------------------------------------------- simple verifiers


async def test_verify_sha256() -> None:
    data = b"payload" * 1000
    good = hashlib.sha256(data).hexdigest()
    assert await collect(verify_sha256(stream_of(data, 100), good.upper())) == data
    err = await expect_stream_error(
        "XAmzContentSHA256Mismatch", verify_sha256(stream_of(data), hashlib.sha256(b"").hexdigest())
    )
    assert err.details["S3ComputedContentSHA256"] == good


async def test_verify_md5() -> None:
    data = b"registry link file"
    good = b64(hashlib.md5(data).digest())
    assert await collect(verify_md5(stream_of(data, 3), good)) == data
    await expect_stream_error(
        "BadDigest", verify_md5(stream_of(data), b64(hashlib.md5(b"").digest()))
    )
    await expect_stream_error("InvalidDigest", verify_md5(stream_of(data), "not-md5"))
    with pytest.raises(S3Error) as caught:
        parse_content_md5(b64(b"short"))
    assert caught.value.code == "InvalidDigest"


@pytest.mark.parametrize(
    ("algorithm", "digest"),
    [
        ("crc32", lambda d: zlib.crc32(d).to_bytes(4, "big")),
        ("crc32c", lambda d: int(google_crc32c.value(d)).to_bytes(4, "big")),
        ("crc64nvme", crc64nvme_reference),
        ("sha1", lambda d: hashlib.sha1(d).digest()),
        ("sha256", lambda d: hashlib.sha256(d).digest()),
    ],
)
async def test_verify_checksum(algorithm: str, digest: object) -> None:
    assert callable(digest)
    data = b"checksummed " * 1234
    value = b64(digest(data))
    result = BodyResult()
    assert (
        await collect(verify_checksum(stream_of(data, 999), algorithm, value, result=result))
        == data
    )
    assert result.checksums == {algorithm: value}
    await expect_stream_error(
        "BadDigest", verify_checksum(stream_of(data), algorithm, b64(digest(b"x")))
    )
    await expect_stream_error("InvalidRequest", verify_checksum(stream_of(data), algorithm, "AAAA"))
    checksum = new_checksum(algorithm.upper())
    assert checksum is not None
    checksum.update(data[:5])
    checksum.update(data[5:])
    assert checksum.digest() == digest(data)


async def test_crc32c_known_value() -> None:
    checksum = new_checksum("crc32c")
    assert checksum is not None
    checksum.update(b"123456789")
    assert checksum.digest().hex() == "e3069283"


@pytest.mark.parametrize(
    ("data", "crc"),
    [
        # The catalogue's check value (CRC-64/NVME, "123456789").
        (b"123456789", "ae8b14860a799888"),
        (b"", "0000000000000000"),
    ],
)
async def test_crc64nvme_known_values(data: bytes, crc: str) -> None:
    checksum = new_checksum("crc64nvme")
    assert checksum is not None
    checksum.update(data[:4])
    checksum.update(data[4:])
    assert checksum.digest().hex() == crc
    assert crc64nvme_reference(data).hex() == crc


async def test_request_body_with_md5_and_checksum_headers(s3: CapturingClient) -> None:
    data = b"docker layer" * 3000
    md5 = b64(hashlib.md5(data).digest())
    wire = s3.call("put_object", Bucket="bucket", Key="k", Body=data, ContentMD5=md5)
    assert wire.header("x-amz-checksum-crc32") is not None
    verified = wire.verify()
    result = BodyResult()
    out = await collect(
        request_body(stream_of(wire.body, 4000), verified, wire.headers, result=result)
    )
    assert out == data
    assert result.size == len(data)
    assert result.checksums == {"crc32": crc32_b64(data)}
    # The body is not the one that was signed.
    other = data[:-1] + b"!"
    await expect_stream_error(
        "XAmzContentSHA256Mismatch", request_body(stream_of(other), verified, wire.headers)
    )
    # An unsigned payload is still held to Content-MD5 and the checksum header.
    unsigned = VerifiedRequest(
        access_key="a",
        payload_mode=PayloadMode.UNSIGNED,
        expected_sha256=None,
        amz_date="20261130T080000Z",
        scope="20261130/us-east-1/s3/aws4_request",
        region="us-east-1",
        seed_signature="0" * 64,
        signing_key=b"k",
    )
    await expect_stream_error("BadDigest", request_body(stream_of(other), unsigned, wire.headers))
    only_crc = {"x-amz-checksum-crc32": crc32_b64(data)}
    await expect_stream_error("BadDigest", request_body(stream_of(other), unsigned, only_crc))
    # Malformed headers are refused before anything is read.
    with pytest.raises(S3Error) as caught:
        request_body(stream_of(data), unsigned, {"Content-MD5": "nope"})
    assert caught.value.code == "InvalidDigest"
    with pytest.raises(S3Error) as caught:
        request_body(stream_of(data), unsigned, {"x-amz-checksum-sha1": "AAAA"})
    assert caught.value.code == "InvalidRequest"
    # x-amz-checksum-algorithm / -type / -mode are not values.
    plain = {"x-amz-checksum-algorithm": "CRC32", "x-amz-checksum-type": "FULL_OBJECT"}
    assert await collect(request_body(stream_of(data), unsigned, plain)) == data


def test_strip_aws_chunked() -> None:
    assert strip_aws_chunked(None) is None
    assert strip_aws_chunked("aws-chunked") is None
    assert strip_aws_chunked("gzip,aws-chunked") == "gzip"
    assert strip_aws_chunked("aws-chunked, gzip, br") == "gzip, br"
    assert strip_aws_chunked("identity") == "identity"
