"""Telegram's flood rules in the simulator, per bot: the spacing of uploads
of one size, and an optional budget of sends per chat.

Kept apart from the rest of the rules (app/telegram/simulator/rules.py):
they hold their own state, times per bot, and touch no message or file.
"""

from __future__ import annotations

import math
from collections import deque

from app.telegram.simulator.config import SimulatorConfig
from app.telegram.simulator.model import ApiError

# telegram-bot-api's Client.cpp, on_cmd: the same-size upload spacing.
SPACED_UPLOAD_MIN_BYTES = 100_000
SPACING_BURST = 1.0  # max_bucket_volume
SPACING_AHEAD_LIMIT = 5.0
SPACING_RETRY_AFTER = 60


class FloodRules:
    def __init__(self, config: SimulatorConfig) -> None:
        # Read at each call: tests change the knobs while the simulator runs.
        self._config = config
        self._sends: dict[tuple[int, int], deque[float]] = {}  # (bot_id, chat_id) -> times
        # Per bot: the time the next upload of each total file size may run.
        self._upload_slots: dict[int, dict[int, float]] = {}

    def space_upload(self, bot_id: int, files_size: int, now: float) -> float:
        """Seconds an upload of files totalling `files_size` bytes waits
        before Telegram takes it, or a 429 once that wait runs too far ahead.

        telegram-bot-api's Client.cpp, `on_cmd`: per bot, a query with files
        over 100,000 bytes in all is spaced from the previous one of the
        *same* total size by clamp(size * 1e-7, 0.2, 0.9) s, with a second
        of burst; when the next slot for that size is more than 5 s ahead
        the query fails with "retry after 60" (`fail_query_flood_limit_
        exceeded`, which answers after 3 s; the simulator answers at once).
        Only queries on one token at once can push the slot that far: one
        call at a time is spaced, never refused. (The server skips the rule
        with --local: the caller's to know.)"""
        if files_size <= SPACED_UPLOAD_MIN_BYTES:
            return 0.0
        slots = self._upload_slots.setdefault(bot_id, {})
        spacing = min(max(files_size * 1e-7, 0.2), 0.9)
        slot = slots.get(files_size, 0.0)
        if slot > now + SPACING_AHEAD_LIMIT:
            raise ApiError.too_many_requests(SPACING_RETRY_AFTER)
        slot = max(slot + spacing, now - SPACING_BURST)
        slots[files_size] = slot
        # The server forgets a size once its slot is that far behind.
        for size in [s for s, at in slots.items() if at < now - SPACING_BURST - 0.9]:
            del slots[size]
        return max(0.0, slot - now)

    def check_send_budget(self, bot_id: int, chat_id: int, now: float) -> None:
        """A 429 once the bot has sent `sends_per_minute` messages into the
        chat within the window (SimulatorConfig.sends_per_minute: where the
        number comes from)."""
        budget = self._config.sends_per_minute
        if budget is None:
            return
        sends = self._sends.setdefault((bot_id, chat_id), deque())
        window = self._config.send_window
        while sends and sends[0] <= now - window:
            sends.popleft()
        if len(sends) >= budget:
            raise ApiError.too_many_requests(max(1, math.ceil(sends[0] + window - now)))
        sends.append(now)
