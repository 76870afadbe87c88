"""Share passwords: argon2id hashes, checked with bounded memory and CPU,
and the cookie that a browser keeps once it has given the right one.

Hashing is argon2id from argon2-cffi (the reference implementation's
bindings), at OWASP's smallest recommended cost (19 MiB, two passes, one
lane): a guess costs an attacker who has the hash that much each, and the
service about 30 ms of one CPU. At most HASHING_AT_ONCE run at a time, in
threads (the bindings release the GIL), so a flood of guesses costs at most
that many times 19 MiB and never stalls the event loop.

The right password is remembered for REMEMBERED_SECONDS (a bounded cache
of SHA-256 digests, never the password): a download manager sends it
with every Range request, and each must not cost a hash.

The unlock cookie is `<expiry>.<HMAC-SHA256 keyed by the password's hash>`:
it needs no table, works on every instance, names one share, expires, and
stops working when the password changes (a new hash, a new key).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from argon2 import PasswordHasher

#: Characters a password may have (argon2 takes any length; a request may not).
MAX_PASSWORD_LENGTH: Final = 1024
#: argon2id at OWASP's minimum (Password Storage Cheat Sheet): m=19 MiB, t=2, p=1.
ARGON2_TIME_COST: Final = 2
ARGON2_MEMORY_KIB: Final = 19 * 1024
#: Hashes computed at once in the process (each holds 19 MiB while it runs).
HASHING_AT_ONCE: Final = 2
#: How long a right password, once checked, is taken without hashing again.
REMEMBERED_SECONDS: Final = 600.0
REMEMBERED_MAX: Final = 4096


class Passwords:
    """Hashing and checking, HASHING_AT_ONCE at a time (one per service)."""

    def __init__(self) -> None:
        self._hashing = asyncio.Semaphore(HASHING_AT_ONCE)
        self._hasher: PasswordHasher | None = None
        # sha256(hash, password) -> when it was checked (monotonic), oldest first.
        self._remembered: OrderedDict[bytes, float] = OrderedDict()

    def _argon2(self) -> PasswordHasher:
        # Imported on first use: a service without password shares never
        # loads the bindings (cffi and the library: memory of an idle server).
        if self._hasher is None:
            from argon2 import PasswordHasher

            self._hasher = PasswordHasher(
                time_cost=ARGON2_TIME_COST, memory_cost=ARGON2_MEMORY_KIB, parallelism=1
            )
        return self._hasher

    async def hash(self, password: str) -> str:
        hasher = self._argon2()
        async with self._hashing:
            return await asyncio.to_thread(hasher.hash, password)

    async def verify(self, password_hash: str, password: str) -> bool:
        """Whether `password` is the one `password_hash` was made from."""
        digest = hashlib.sha256(
            password_hash.encode() + b"\x00" + password.encode("utf-8", "surrogatepass")
        ).digest()
        now = time.monotonic()
        seen = self._remembered.get(digest)
        if seen is not None and now - seen < REMEMBERED_SECONDS:
            return True
        from argon2.exceptions import InvalidHashError, VerificationError

        hasher = self._argon2()
        async with self._hashing:
            try:
                await asyncio.to_thread(hasher.verify, password_hash, password)
            except (VerificationError, InvalidHashError):
                return False
        self._remembered[digest] = now
        self._remembered.move_to_end(digest)
        while len(self._remembered) > REMEMBERED_MAX:
            self._remembered.popitem(last=False)
        return True


def unlock_cookie(share_id: int, password_hash: str, expires: int) -> str:
    """The cookie value that proves the password of share `share_id` was
    given, until `expires` (Unix seconds)."""
    return f"{expires}.{_mac(share_id, password_hash, expires)}"


def unlocked(cookie: str | None, share_id: int, password_hash: str, now: float) -> bool:
    if not cookie or len(cookie) > 128:
        return False
    expires, _, mac = cookie.partition(".")
    if not expires.isascii() or not expires.isdigit() or int(expires) <= now:
        return False
    return hmac.compare_digest(mac, _mac(share_id, password_hash, int(expires)))


def _mac(share_id: int, password_hash: str, expires: int) -> str:
    message = f"share-unlock:{share_id}:{expires}".encode()
    return hmac.new(password_hash.encode(), message, hashlib.sha256).hexdigest()
