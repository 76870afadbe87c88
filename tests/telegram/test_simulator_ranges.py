"""Range requests on the simulator's file endpoint, as Telegram's file server
(a static-file nginx) answers them: one range gets 206 with Content-Range,
none gets 200, a range past the end gets 416. `honour_range=False` is a file
server that ignores Range, for clients that must cope with a whole file."""

from __future__ import annotations

import random

import httpx
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from app.telegram.client import BotClient
from app.telegram.simulator import TelegramSimulator
from app.telegram.simulator.ranges import Span, Unsatisfiable, requested_span
from tests.telegram.conftest import CHAT_ID

SIZE = 10_000
DATA = random.Random(7).randbytes(SIZE)


@pytest.fixture
async def file_url(bots: list[BotClient]) -> str:
    """The download path of a stored file, relative to the simulator."""
    stored = await bots[0].send_document(CHAT_ID, DATA, "a.bin")
    location = await bots[0].get_file(stored.file_id)
    return f"/file/bot{bots[0].token.value}/{location.file_path}"


async def test_a_download_without_range_is_the_whole_file_with_200(
    http: httpx.AsyncClient, file_url: str
) -> None:
    answer = await http.get(file_url)

    assert answer.status_code == 200
    assert answer.content == DATA
    assert answer.headers["accept-ranges"] == "bytes"
    assert "content-range" not in answer.headers


@pytest.mark.parametrize(
    ("header", "first", "last"),
    [
        ("bytes=0-0", 0, 0),
        ("bytes=100-199", 100, 199),
        ("bytes=9000-", 9000, SIZE - 1),
        ("bytes=9990-20000", 9990, SIZE - 1),  # an end past the file is cut to it
        ("bytes=-10", SIZE - 10, SIZE - 1),
        ("bytes=-20000", 0, SIZE - 1),
        ("BYTES = 5 - 6", 5, 6),
    ],
)
async def test_one_range_gets_206_with_exactly_its_bytes(
    sim: TelegramSimulator,
    http: httpx.AsyncClient,
    file_url: str,
    header: str,
    first: int,
    last: int,
) -> None:
    answer = await http.get(file_url, headers={"Range": header})

    assert answer.status_code == 206
    assert answer.content == DATA[first : last + 1]
    assert answer.headers["content-range"] == f"bytes {first}-{last}/{SIZE}"
    assert answer.headers["content-length"] == str(last + 1 - first)
    assert sim.stats()[sim.bot_ids[0]].bytes_sent == last + 1 - first


@pytest.mark.parametrize("header", ["bytes=10000-", "bytes=20000-30000", "bytes=-0", "bytes=5-4"])
async def test_a_range_outside_the_file_gets_416(
    http: httpx.AsyncClient, file_url: str, header: str
) -> None:
    answer = await http.get(file_url, headers={"Range": header})

    assert answer.status_code == 416
    assert answer.headers["content-range"] == f"bytes */{SIZE}"
    assert "416 Requested Range Not Satisfiable" in answer.text


@pytest.mark.parametrize("header", ["bytes=0-1,5-6", "items=0-1", ""])
async def test_what_is_not_one_byte_range_gets_the_whole_file(
    http: httpx.AsyncClient, file_url: str, header: str
) -> None:
    answer = await http.get(file_url, headers={"Range": header})

    assert answer.status_code == 200
    assert answer.content == DATA


async def test_a_file_server_that_ignores_range_sends_the_whole_file(
    sim: TelegramSimulator, http: httpx.AsyncClient, file_url: str
) -> None:
    sim.configure(honour_range=False)

    answer = await http.get(file_url, headers={"Range": "bytes=0-9"})

    assert answer.status_code == 200
    assert answer.content == DATA
    assert "accept-ranges" not in answer.headers


async def test_a_dropped_range_download_stops_halfway_through_its_span(
    sim: TelegramSimulator, http: httpx.AsyncClient, file_url: str
) -> None:
    sim.set_faults(fault_download_drop_rate=1.0)

    with pytest.raises(httpx.RemoteProtocolError):
        await http.get(file_url, headers={"Range": "bytes=1000-2999"})

    assert sim.stats()[sim.bot_ids[0]].bytes_sent == 1000


# --- the parser -------------------------------------------------------------------------


@given(
    size=st.integers(min_value=0, max_value=5000),
    first=st.integers(min_value=0, max_value=6000),
    last=st.none() | st.integers(min_value=0, max_value=6000),
)
@example(size=0, first=0, last=None)
@example(size=1, first=0, last=0)
def test_a_first_last_range_is_a_python_slice_or_unsatisfiable(
    size: int, first: int, last: int | None
) -> None:
    header = f"bytes={first}-{'' if last is None else last}"
    data = bytes(range(256)) * 20
    data = data[:size]

    if first >= size or (last is not None and last < first):
        with pytest.raises(Unsatisfiable):
            requested_span(header, size)
        return
    span = requested_span(header, size)
    assert span is not None
    end = size if last is None else last + 1
    assert data[span.first : span.last + 1] == data[first:end]
    assert 0 <= span.first <= span.last < size


@given(size=st.integers(min_value=0, max_value=5000), suffix=st.integers(0, 6000))
def test_a_suffix_range_is_the_files_tail_or_unsatisfiable(size: int, suffix: int) -> None:
    if size == 0 or suffix == 0:
        with pytest.raises(Unsatisfiable):
            requested_span(f"bytes=-{suffix}", size)
        return
    assert requested_span(f"bytes=-{suffix}", size) == Span(max(0, size - suffix), size - 1)


@given(header=st.text(max_size=60), size=st.integers(min_value=0, max_value=10**12))
@example(header="bytes=" + "9" * 5000, size=10)
@example(header="bytes=٣-٤", size=10)  # digits of another script are not digits here
def test_any_header_is_a_span_inside_the_file_none_or_unsatisfiable(header: str, size: int) -> None:
    try:
        span = requested_span(header, size)
    except Unsatisfiable:
        return
    assert span is None or 0 <= span.first <= span.last < size
