"""The Bot API client over HTTPS, as it talks to Telegram: `teleuploader
telegram-sim --tls-cert --tls-key` in a process of its own, and a `BotClient`
on the service's own sockets (app/telegram/network.py) that trusts only the
test's CA. A document sent in pieces comes back byte for byte, whole and as a
Range; a client that does not trust the certificate is refused, and told
why without its token."""

from __future__ import annotations

import hashlib
import os
import ssl
from pathlib import Path

import httpx
import pytest
import trustme

from app.config.settings import BotToken
from app.telegram.chunk_pieces import ChunkPieces
from app.telegram.client import BotClient
from app.telegram.errors import TelegramError
from app.telegram.network import LoopTransport
from tests.deploy.conftest import sim_process

CHAT_ID = -1001000000777


async def test_a_document_goes_and_comes_back_over_https(tmp_path: Path) -> None:
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    trusting = ssl.create_default_context()
    ca.configure_trust(trusting)
    data = os.urandom(3 * 1024 * 1024 + 11)
    pieces = [data[at : at + 256_000] for at in range(0, len(data), 256_000)]

    with sim_process(tmp_path, 1, CHAT_ID, tls=(cert, key)) as sim:
        assert sim.url.startswith("https://")
        transport = LoopTransport(verify=trusting, limits=httpx.Limits())
        client = BotClient(BotToken.parse(sim.tokens[0]), api_base=sim.url, transport=transport)
        try:
            stored = await client.send_document(CHAT_ID, ChunkPieces(pieces), "tls.bin")
            location = await client.get_file(stored.file_id)
            async with client.open_file(location.file_path) as body:
                whole = b"".join([piece async for piece in body])
            async with client.open_file_at(location.file_path, 1_000_000, 1_065_536) as (
                start,
                ranged,
            ):
                part = b"".join([piece async for piece in ranged])
        finally:
            await client.aclose()
        assert hashlib.sha256(whole).digest() == hashlib.sha256(data).digest()
        assert data[start:][: len(part)] == part
        assert start + len(part) >= 1_065_536

        # The system's roots do not include the test's CA: no call gets through.
        untrusting = BotClient(BotToken.parse(sim.tokens[0]), api_base=sim.url)
        try:
            with pytest.raises(TelegramError) as refused:
                await untrusting.get_me()
            assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
            assert sim.tokens[0].split(":")[1] not in str(refused.value)
        finally:
            await untrusting.aclose()
