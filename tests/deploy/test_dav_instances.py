"""WebDAV locks across instances: two `teleuploader serve` processes on one
Postgres (through pgbouncer), as behind Caddy. A lock taken through one
binds a write through the other, and the other may release it: the locks
live in the database, not in a process (wsgidav #332: per-process locks
made Windows' saves fail with 412 and leave empty files)."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import empty_tables
from tests.db.helpers import Database
from tests.deploy.conftest import ServiceStarter

pytestmark = [pytest.mark.postgres, pytest.mark.postgres_only]

LOCKINFO = (
    b'<D:lockinfo xmlns:D="DAV:"><D:lockscope><D:exclusive/></D:lockscope>'
    b"<D:locktype><D:write/></D:locktype><D:owner>instance A</D:owner></D:lockinfo>"
)


def test_a_lock_taken_through_one_instance_binds_a_write_through_another(
    start_service: ServiceStarter, postgres_database: Database
) -> None:
    empty_tables(postgres_database)
    first = start_service(postgres_database.url, api_key=True)
    second = start_service(postgres_database.url)
    assert first.key is not None
    auth = ("windows", first.key)
    with (
        httpx.Client(base_url=first.url, auth=auth, timeout=30) as a,
        httpx.Client(base_url=second.url, auth=auth, timeout=30) as b,
    ):
        assert a.put("/dav/shared.docx", content=b"v1").status_code == 201
        lock = a.request("LOCK", "/dav/shared.docx", content=LOCKINFO, headers={"Depth": "0"})
        assert lock.status_code == 200
        token = lock.headers["lock-token"]

        refused = b.put("/dav/shared.docx", content=b"from B")
        assert refused.status_code == 423 and "lock-token-submitted" in refused.text
        assert b.delete("/dav/shared.docx").status_code == 423
        discovered = b.request(
            "PROPFIND",
            "/dav/shared.docx",
            headers={"Depth": "0"},
            content=b'<propfind xmlns="DAV:"><prop><lockdiscovery/></prop></propfind>',
        )
        assert token.strip("<>") in discovered.text

        saved = b.put("/dav/shared.docx", content=b"v2", headers={"If": f"({token})"})
        assert saved.status_code == 204
        assert (
            b.request("UNLOCK", "/dav/shared.docx", headers={"Lock-Token": token}).status_code
            == 204
        )
        assert a.put("/dav/shared.docx", content=b"v3").status_code == 204
        assert b.get("/dav/shared.docx").content == b"v3"
