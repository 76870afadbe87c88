"""Telegram: the Bot API client, the per-bot dispatcher (one call per token), the simulator."""
