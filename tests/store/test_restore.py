"""How a restore walks the journal's chain (app/store/restore.py): batches
of the first format name every predecessor, later ones their predecessor
and a few further back; both are found, and a batch that cannot be had
ends the journal there, with the batches before it applied."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from app.store import restore
from app.store.encryption import Encryption
from app.store.journal import back_refs


def entry(seq: int) -> dict[str, Any]:
    return {"seq": seq, "copies": [{"bot_id": 1, "file_id": f"f{seq}"}]}


def batch(seq: int, header: dict[str, Any]) -> Any:
    return restore._Batch({"seq": seq, **header}, entry(seq), [])


async def walk(
    monkeypatch: pytest.MonkeyPatch,
    headers: dict[int, dict[str, Any]],
    lost: frozenset[int] = frozenset(),
) -> tuple[list[int], list[str]]:
    async def fetch(found: dict[str, Any], _copies: Sequence[dict[str, Any]], *_args: Any) -> Any:
        seq = int(found["seq"])
        if seq in lost:
            raise ValueError("gone")
        return batch(seq, headers[seq])

    monkeypatch.setattr(restore, "_fetch_batch", fetch)
    newest = max(headers)
    problems: list[str] = []
    found = await restore._walk_back(batch(newest, headers[newest]), {}, Encryption(None), problems)
    return [int(b.header["seq"]) for b in found], problems


def chained(last: int) -> dict[int, dict[str, Any]]:
    chain = [entry(seq) for seq in range(1, last + 1)]
    return {seq: {"previous": back_refs(chain, seq)} for seq in range(1, last + 1)}


async def test_a_chain_of_the_first_format_is_read_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    headers = {
        seq: {"predecessors": [entry(before) for before in range(1, seq)]} for seq in (1, 2, 3)
    }
    assert await walk(monkeypatch, headers) == ([1, 2, 3], [])


async def test_a_chain_that_changed_format_midway_is_walked_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    headers = chained(6)
    headers[1] = {"predecessors": []}
    headers[2] = {"predecessors": [entry(1)]}
    assert await walk(monkeypatch, headers) == ([1, 2, 3, 4, 5, 6], [])


async def test_a_lost_batch_is_stepped_over_to_apply_the_ones_before_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found, problems = await walk(monkeypatch, chained(20), lost=frozenset({13}))
    assert found == list(range(1, 13))
    assert len(problems) == 1 and "journal batch 13 cannot be had" in problems[0]
