"""The Bot API methods the simulator serves, and the `TelegramRules` method
that carries out each: the table the HTTP layer dispatches on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from app.telegram.simulator.config import FAULTABLE_METHODS
from app.telegram.simulator.model import _Params
from app.telegram.simulator.rules import TelegramRules


@dataclass(frozen=True)
class _Method:
    name: str
    # The TelegramRules method that carries it out, looked up on the
    # simulator at each call so that a subclass may extend it (the demo's
    # simulator records what changed: app/telegram/simulator/persistent.py).
    attribute: str
    upload: bool = False

    @property
    def faultable(self) -> bool:
        """Whether random faults strike this method."""
        return self.name in FAULTABLE_METHODS

    def handler(self, rules: TelegramRules, bot_id: int, params: _Params) -> Any:
        run: Callable[[int, _Params], Any] = getattr(rules, self.attribute)
        return run(bot_id, params)


_METHODS = {
    method.name.lower(): method
    for method in (
        _Method("getMe", "_get_me"),
        _Method("sendDocument", "_send_document", upload=True),
        _Method("getFile", "_get_file"),
        _Method("deleteMessage", "_delete_message"),
        _Method("forwardMessage", "_forward_message"),
        _Method("getChatMember", "_get_chat_member"),
        _Method("pinChatMessage", "_pin_chat_message"),
        _Method("unpinChatMessage", "_unpin_chat_message"),
        _Method("getChat", "_get_chat"),
        _Method("editMessageCaption", "_edit_message_caption"),
    )
}


def _canonical_method(name: str) -> str:
    # Bot API method names are case-insensitive.
    method = _METHODS.get(name.lower())
    return method.name if method else name
