"""What `teleuploader check --deep` found (app/cli/deep_check.py), as
suggestions for the settings and as tables an operator reads."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from app.cli.deep_report import DeepReport, DocumentTrial, Suggestion
from app.config.settings import MAX_CHUNK_SIZE, Settings

MiB = 1024 * 1024
#: A chunk's upload should take about this long at most: a chunk holds its
#: bot and an upload buffer while it goes, and a failed try costs it whole.
UPLOAD_SECONDS = 60.0
#: The largest CHUNK_SIZE suggested for a local server: every upload buffer
#: holds one (UPLOAD_BUFFER_CHUNKS x CHUNK_SIZE of memory).
LOCAL_CHUNK_CEILING = 256 * MiB
#: Telegram's FAQ: about 20 messages a minute into one group or channel.
SENDS_PER_MINUTE = 20


def advise(report: DeepReport, settings: Settings) -> list[Suggestion]:
    suggestions = [
        _chunk_size(report, settings),
        _sends_per_minute(report),
        _replicas(report, settings),
        _stall_seconds(report, settings),
    ]
    ranges = {trial.range for trial in _trials(report) if trial.range is not None}
    if "ignored" in ranges:
        suggestions.append(
            Suggestion(
                "DOWNLOAD_BUFFER_BYTES",
                f"{max(settings.download_buffer_bytes, 4 * settings.chunk_size)}",
                "the file server ignores Range: every read of a part of a chunk downloads "
                "the chunk whole; room for four whole chunks keeps reads going",
            )
        )
    return [suggestion for suggestion in suggestions if suggestion is not None]


def _trials(report: DeepReport) -> list[DocumentTrial]:
    return [
        trial
        for bot in report.bots
        for chat in bot.chats
        for trial in (chat.small, chat.large)
        if trial is not None
    ]


def _chunk_size(report: DeepReport, settings: Settings) -> Suggestion | None:
    rates = [bot.upload_bandwidth for bot in report.bots if bot.upload_bandwidth]
    if not rates:
        return None
    slowest = min(rates)
    ceiling = LOCAL_CHUNK_CEILING if settings.telegram_local_server else MAX_CHUNK_SIZE
    fits = max(MiB, int(slowest * UPLOAD_SECONDS) // MiB * MiB)
    value = min(ceiling, fits)
    limit = (
        "with a local server, as every upload buffer holds one"
        if settings.telegram_local_server
        else "from api.telegram.org, whose getFile stops at 20 MiB"
    )
    return Suggestion(
        "CHUNK_SIZE",
        str(value),
        f"the slowest bot uploads {slowest / MiB:.1f} MiB/s: a chunk of {value / MiB:g} MiB "
        f"goes in {value / slowest:.0f} s (at most {ceiling / MiB:g} MiB {limit})",
    )


def _sends_per_minute(report: DeepReport) -> Suggestion:
    waits = [
        limit.retry_after
        for bot in report.bots
        for limit in bot.rate_limits
        if limit.method == "sendDocument"
    ]
    if not waits:
        return Suggestion(
            "SENDS_PER_MINUTE",
            str(SENDS_PER_MINUTE),
            "no upload was refused (429); Telegram's FAQ allows about 20 a minute into a channel",
        )
    return Suggestion(
        "SENDS_PER_MINUTE",
        str(SENDS_PER_MINUTE // 2),
        f"Telegram refused {len(waits)} of these few uploads (429, waits up to "
        f"{max(waits):g} s): send more slowly, and add bots (each paces on its own)",
    )


def _replicas(report: DeepReport, settings: Settings) -> Suggestion:
    working = [bot for bot in report.bots if not bot.problems]
    if len(settings.chat_ids) >= 2 and len(working) >= 2:
        return Suggestion(
            "REPLICAS",
            "2",
            f"{len(settings.chat_ids)} storage chats and {len(working)} working bots: two "
            "copies in two chats survive the loss of a chat, a bot or a message",
        )
    return Suggestion(
        "REPLICAS",
        "1",
        "two copies need two storage chats and two working bots (add a chat to "
        "STORAGE_CHAT_IDS, a bot to BOT_TOKENS); until then one copy survives no loss",
    )


def _stall_seconds(report: DeepReport, settings: Settings) -> Suggestion | None:
    getfiles = [
        trial.getfile_seconds
        for bot in report.bots
        for chat in bot.chats
        if (trial := chat.large) is not None and trial.getfile_seconds is not None
    ]
    if not getfiles:
        return None
    longest = max(getfiles)
    value = max(settings.download_stall_seconds, math.ceil(3 * longest))
    return Suggestion(
        "DOWNLOAD_STALL_SECONDS",
        f"{value:g}",
        f"getFile of a CHUNK_SIZE document took up to {longest:.1f} s (the server downloads "
        "the file before it answers, and a read waits for it): a read that waits this long "
        "for its first byte is ended",
    )


# --- what an operator reads -----------------------------------------------------------


def print_report(report: DeepReport, console: Console) -> None:
    console.print(f"Deep check of {report.server} ({'local' if report.local_server else 'cloud'})")
    bots = Table(title="Bots, measured one at a time")
    for column in ("bot id", "getMe", "upload", "download", "429s (retry_after)", "problems"):
        bots.add_column(column, overflow="fold")
    for bot in report.bots:
        bots.add_row(
            str(bot.bot_id),
            _seconds(bot.latency_seconds),
            _rate(bot.upload_bandwidth),
            _rate(bot.download_bandwidth),
            ", ".join(f"{limit.method} {limit.retry_after:g} s" for limit in bot.rate_limits)
            or "none",
            "; ".join(bot.problems) or "",
        )
    console.print(bots)
    documents = Table(title="Test documents (sent, getFile, downloaded, Range, checked, deleted)")
    for column in (
        "bot",
        "chat",
        "rights",
        "size",
        "send",
        "getFile",
        "download",
        "Range",
        "bytes",
    ):
        documents.add_column(column, overflow="fold")
    for bot in report.bots:
        for chat in bot.chats:
            rights = ", ".join(name for name, value in chat.rights.items() if value is True)
            for trial in (chat.small, chat.large):
                if trial is None:
                    continue
                documents.add_row(
                    str(bot.bot_id),
                    str(chat.chat_id),
                    f"{chat.rights.get('status', '?')}: {rights}",
                    f"{trial.size / MiB:.2f} MiB",
                    _seconds(trial.upload_seconds),
                    _seconds(trial.getfile_seconds),
                    _seconds(trial.download_seconds),
                    trial.range or "-",
                    _checked(trial),
                )
    console.print(documents)
    suggestions = Table(title="Suggested settings")
    for column in ("setting", "value", "why"):
        suggestions.add_column(column, overflow="fold")
    for suggestion in report.suggestions:
        suggestions.add_row(suggestion.setting, suggestion.value, suggestion.why)
    console.print(suggestions)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value / MiB:.1f} MiB/s"


def _checked(trial: DocumentTrial) -> str:
    intact = {True: "right", False: "WRONG", None: "-"}[trial.intact]
    deleted = {True: "deleted", False: "NOT deleted", None: "-"}[trial.deleted]
    return f"{intact}, {deleted}"
