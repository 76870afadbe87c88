"""What the command line tells an operator about the stored data:
`teleuploader scrub` (a full pass, through the running service, which owns
the bots) and the stored-data part of `teleuploader check` (the database's
count of what the scrub and the reads found)."""

from __future__ import annotations

import time
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from app.cli.client import ClientError, explain


def run_scrub(
    *,
    url: str,
    key: str | None,
    deep: bool,
    wait: bool,
    poll_seconds: float = 1.0,
    console: Console,
) -> dict[str, Any]:
    """Ask the running service for a full scrub pass (POST /api/admin/scrub,
    an admin key) and, `wait`, follow it until it ends; its report."""
    if not key:
        raise ClientError("an admin API key is needed: --key or TELEUPLOADER_KEY")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as http:
        try:
            response = http.post("/api/admin/scrub", json={"deep": deep})
            if response.status_code != 202:
                raise ClientError(f"cannot start a scrub: {explain(response)}")
            status: dict[str, Any] = response.json()
            while wait and status["last_pass"] is not None and status["last_pass"]["running"]:
                time.sleep(poll_seconds)
                response = http.get("/api/admin/scrub")
                if response.status_code != 200:
                    raise ClientError(f"cannot follow the scrub: {explain(response)}")
                status = response.json()
                checked = status["last_pass"]["checked"]
                console.print(f"scrub: {checked} copies checked", end="\r")
        except httpx.HTTPError as exc:
            raise ClientError(f"cannot reach {url}: {exc}") from None
    done = status["last_pass"] or {}
    if done.get("error"):
        raise ClientError(f"the scrub failed: {done['error']}")
    return {
        **{
            name: done.get(name, 0)
            for name in ("checked", "missing", "corrupt", "unavailable", "repaired", "skipped")
        },
        "degraded_objects": status["degraded_objects"],
        "lost_objects": status["lost_objects"],
        "degraded_chunks": status["degraded_chunks"],
        "lost_chunks": status["lost_chunks"],
        "replicas": status["replicas"],
        "finished": not done.get("running", True),
    }


async def check_durability(settings: Any, console: Console) -> bool:
    """How the stored data stands (the database's count of the scrub's and
    the reads' findings); False if an object is lost."""
    from app.db.copies import CopyRepository
    from app.db.engine import create_engine, create_sessionmaker
    from app.db.migrations import schema_is_current
    from app.db.session import session_scope
    from app.store.flush_lag import measure_lag

    engine = create_engine(settings.database_url)
    try:
        if not await schema_is_current(engine):
            console.print("stored data: not checked (the database is not migrated)")
            return True
        sessionmaker = create_sessionmaker(engine)
        async with session_scope(sessionmaker) as session:
            health = await CopyRepository(session).health(settings.replicas)
        lag = await measure_lag(sessionmaker)
    except Exception as exc:  # the bots' checks above stand on their own
        console.print(f"stored data: not checked (DATABASE_URL: {type(exc).__name__})")
        return True
    finally:
        await engine.dispose()
    table = Table(title=f"Stored data (REPLICAS={settings.replicas})")
    for column in ("chunk copies", "degraded objects", "lost objects"):
        table.add_column(column)
    table.add_row(str(health.copies), str(health.objects_degraded), str(health.objects_lost))
    console.print(table)
    console.print(
        f"spool: {lag.unflushed_bytes} bytes not yet in Telegram (every instance's), "
        f"the oldest waiting {lag.oldest_seconds:.0f} s"
    )
    if lag.oldest_seconds > settings.flush_lag_alert:
        console.print(
            f"[red]spooled bytes have waited past FLUSH_LAG_ALERT ({settings.flush_lag_alert:g} "
            "s): until they reach Telegram they live on one machine's disk only "
            "(deploy/README.md: The spool window)[/red]"
        )
    if health.objects_lost:
        console.print(
            f"[red]{health.objects_lost} objects are lost: no intact copy of a chunk of theirs "
            "is left in Telegram (README: Durability)[/red]"
        )
    elif health.objects_degraded:
        console.print(
            f"{health.objects_degraded} objects have fewer than {settings.replicas} intact "
            "copies of a chunk: the scrub repairs them"
        )
    return health.objects_lost == 0
