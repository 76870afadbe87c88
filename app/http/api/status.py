"""GET /api/status: what the web page's status screen shows an operator (per
bot: usable, cooling down, queue, recent sends; the upload budget and spool;
the GC backlog and the messages left in the chats for good; how full each
storage chat is; the stored data's state; the last ten minutes of
throughput). Needs a key. The bots' ids, usernames and queues follow
METRICS_ACCESS as on /metrics and /ready: with `off`, no key sees them."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from app.http.api.body_limits import SmallBodyRoute
from app.http.api.deps import ServicesDep, verify_key

router = APIRouter(tags=["web page"], route_class=SmallBodyRoute)


class BotRow(BaseModel):
    bot_id: int
    username: str | None
    usable: bool
    cooling_down_seconds: float
    queued: int
    running: bool
    recent_sends: int
    recent_bytes: int
    total_sends: int
    total_bytes: int


class UploadBudget(BaseModel):
    buffers_in_use: int
    buffers: int
    waiting_uploads: int
    spool_enabled: bool
    spool_bytes: int
    spool_max_bytes: int
    # Not yet in Telegram (on this machine's disk only), and the oldest's age.
    unflushed_bytes: int
    oldest_unflushed_seconds: float


class ThroughputPoint(BaseModel):
    at: float
    upload_bytes_per_second: float
    download_bytes_per_second: float


class Durability(BaseModel):
    """How the stored data stands, as the scrub last counted it."""

    replicas: int
    counted: bool  # False until the scrub's first round
    degraded_objects: int
    lost_objects: int
    repaired: int


class ChatRow(BaseModel):
    """A storage chat's fill: its newest message id seen (every message ever
    posted there), against CHAT_MESSAGE_LIMIT; a full one takes no new writes."""

    chat_id: int
    messages: int
    limit: int  # 0: no limit
    full: bool


class Status(BaseModel):
    bots: list[BotRow]
    # True when METRICS_ACCESS=off keeps the bots' rows from every key.
    bots_hidden: bool
    recent_seconds: float
    upload_budget: UploadBudget
    gc_backlog: int
    # Messages no longer needed that stay in the chats for good (docs/trash.md).
    left_in_channel: int
    chats: list[ChatRow]
    durability: Durability
    sample_seconds: float
    throughput: list[ThroughputPoint]


@router.get("/api/status", response_model=Status)
async def status(request: Request, services: ServicesDep) -> Status:
    """The service's state for the status screen (JSON)."""
    await verify_key(request, services)
    fill = services.dispatcher.fill
    history = services.throughput
    recent_seconds, recent = history.recent_bots()
    bots = []
    hidden = services.settings.metrics_access == "off"
    for bot in [] if hidden else services.dispatcher.status():
        info = services.bots.get(bot.bot_id)
        lately = recent.get(bot.bot_id)
        bots.append(
            BotRow(
                bot_id=bot.bot_id,
                username=info.username if info else None,
                usable=bot.usable,
                cooling_down_seconds=round(bot.cooling_down_for, 1),
                queued=bot.queued,
                running=bot.running,
                recent_sends=lately.sends if lately else 0,
                recent_bytes=lately.bytes_sent if lately else 0,
                total_sends=bot.sends,
                total_bytes=bot.bytes_sent,
            )
        )
    spool = services.spool
    lag = await services.flush_lag.measure()
    health = services.scrub.last_health
    return Status(
        bots=bots,
        bots_hidden=hidden,
        recent_seconds=round(recent_seconds, 1),
        upload_budget=UploadBudget(
            buffers_in_use=services.buffers.in_use,
            buffers=services.buffers.count,
            waiting_uploads=services.buffers.waiting,
            spool_enabled=spool.enabled,
            spool_bytes=spool.used,
            spool_max_bytes=spool.max_bytes,
            unflushed_bytes=lag.unflushed_bytes,
            oldest_unflushed_seconds=round(lag.oldest_seconds, 1),
        ),
        gc_backlog=services.gc.last_backlog,
        left_in_channel=services.gc.last_left,
        chats=[
            ChatRow(
                chat_id=chat_id,
                messages=fill.newest.get(chat_id, 0),
                limit=fill.limit,
                full=fill.full(chat_id),
            )
            for chat_id in services.dispatcher.chat_ids
        ],
        durability=Durability(
            replicas=services.scrub.replicas,
            counted=health is not None,
            degraded_objects=health.objects_degraded if health else 0,
            lost_objects=health.objects_lost if health else 0,
            repaired=services.scrub.repaired,
        ),
        sample_seconds=history.interval,
        throughput=[
            ThroughputPoint(
                at=rate.at,
                upload_bytes_per_second=round(rate.upload_bytes_per_second, 1),
                download_bytes_per_second=round(rate.download_bytes_per_second, 1),
            )
            for rate in history.rates()
        ],
    )
