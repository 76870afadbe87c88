"""Bot tokens as secrets: a `BotToken`'s `repr` and `str` are masked, so a
settings dump or a validation error never prints one, and a malformed token
is named by its place in the list and what is wrong with it."""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN_RE = re.compile(r"^(\d{3,20}):([A-Za-z0-9_-]{20,})$")


@dataclass(frozen=True, slots=True)
class BotToken:
    """A bot token. Its text never reaches a log or an error: `str()` masks it."""

    bot_id: int
    secret: str

    @property
    def value(self) -> str:
        """The full token, for building Bot API URLs. Nothing else should call this."""
        return f"{self.bot_id}:{self.secret}"

    @property
    def masked(self) -> str:
        return f"{self.bot_id}:***"

    def __str__(self) -> str:
        return self.masked

    def __repr__(self) -> str:
        return f"BotToken({self.masked})"

    @classmethod
    def parse(cls, text: str) -> BotToken:
        match = _TOKEN_RE.match(text.strip())
        if match is None:
            raise ValueError(_why_not_a_token(text.strip()))
        return cls(bot_id=int(match.group(1)), secret=match.group(2))


TOKEN_RULE = (
    "a token is <bot id>:<secret> as @BotFather gives it, the bot id 3 to 20 digits "
    "and the secret at least 20 of A-Z a-z 0-9 _ -"
)


def _why_not_a_token(text: str) -> str:
    """What is wrong with a text that is not a token, showing only what is
    safe: the bot id, never any of the secret."""
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return "it is in quotes; values are taken literally, leave the quotes out"
    head, colon, secret = text.partition(":")
    if not colon:
        return "it has no ':'"
    if not head.isdigit():
        return "the part before ':' is not a bot id"
    shown = f"({head}:***): "
    if not 3 <= len(head) <= 20:
        return f"{shown}its bot id has {len(head)} digits"
    if re.fullmatch(r"[A-Za-z0-9_-]*", secret) is None:
        return f"{shown}its secret has a character other than A-Z a-z 0-9 _ -"
    return f"{shown}its secret is {len(secret)} characters long"


def parse_tokens(texts: list[str]) -> list[BotToken]:
    """Each text a token; a bad one is named by its place in the list."""
    tokens = []
    for number, text in enumerate(texts, start=1):
        try:
            tokens.append(BotToken.parse(text))
        except ValueError as exc:
            where = f"token {number} of {len(texts)}"
            problem = str(exc)
            joiner = " " if problem.startswith("(") else ": "
            raise ValueError(f"{where}{joiner}{problem} ({TOKEN_RULE})") from None
    return tokens
