"""The on-demand passes' status (`/api/admin/scrub`, and the sealing
migration's `/api/admin/encryption/migrate`, which says its failure the same
way): a failed pass reports a stable sentence, and the log has the detail."""

from __future__ import annotations

from typing import Any

import pytest

from app.sealing.keys import new_master_key_text
from tests.running_service import Service, ServiceFactory, eventually

# What an exception's text may carry that no client is to see.
DETAIL = "could not open /var/lib/teleuploader/spool/x: SELECT secret FROM t"


async def fail(*_args: Any, **_kwargs: Any) -> None:
    raise OSError(DETAIL)


async def finished(service: Service, path: str) -> dict[str, Any]:
    async with service.client(headers=service.auth) as http:
        started = await http.post(path)
        assert started.status_code == 202, started.text
        done: dict[str, Any] = {}

        async def over() -> bool:
            done.update((await http.get(path)).json())
            return done["last_pass"]["finished_at"] is not None

        await eventually(over)
    return done["last_pass"]


async def test_a_failed_scrub_says_so_without_the_exceptions_text(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(service.app.state.services.scrub, "run_pass", fail)

    failed = await finished(service, "/api/admin/scrub")

    assert failed["error"] == (
        "the pass did not finish: an internal error stopped it "
        "(the service's log has the detail: scrub_pass_failed)"
    )
    log = capsys.readouterr().out
    assert "scrub_pass_failed" in log and DETAIL in log


async def test_a_failed_migration_says_so_without_the_exceptions_text(
    start_service: ServiceFactory,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    service = await start_service(encryption_keys=new_master_key_text("k1"))
    monkeypatch.setattr(service.app.state.services.sealing_migration, "run_pass", fail)

    failed = await finished(service, "/api/admin/encryption/migrate")

    assert DETAIL not in failed["error"]
    assert "sealing_migration_failed" in failed["error"]
    log = capsys.readouterr().out
    assert "sealing_migration_failed" in log and DETAIL in log
