"""Listing keys a page at a time, rolled up into common prefixes at a delimiter
(S3's ListObjects), with range scans only.

When a key rolls up into a common prefix, the next scan starts past every key
under that prefix, so a prefix with a million keys costs one query, not a
million rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.db.objects import prefix_upper_bound
from app.store.service import ObjectInfo, ObjectStore


@dataclass
class Listing:
    objects: list[ObjectInfo] = field(default_factory=list)
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    # The last key or common prefix returned: where the next page starts.
    last: str | None = None

    @property
    def count(self) -> int:
        return len(self.objects) + len(self.prefixes)


async def list_page(
    store: ObjectStore,
    bucket: str,
    *,
    prefix: str,
    delimiter: str | None,
    after: str | None,
    max_keys: int,
) -> Listing:
    """Up to `max_keys` keys and common prefixes after `after`, in byte order."""
    listing = Listing()
    after_key, from_key = after, None
    while max_keys > 0:
        wanted = max_keys - listing.count + 1
        batch = await store.list(
            bucket, prefix=prefix, after_key=after_key, from_key=from_key, limit=wanted
        )
        jumped = False
        for info in batch:
            rest = info.key[len(prefix) :]
            cut = rest.find(delimiter) if delimiter else -1
            if delimiter and cut >= 0:
                common = prefix + rest[: cut + len(delimiter)]
                # A marker that is itself a common prefix was listed already.
                if after is None or common > after:
                    if listing.count == max_keys:
                        listing.truncated = True
                        return listing
                    listing.prefixes.append(common)
                    listing.last = common
                upper = prefix_upper_bound(common)
                if upper is None:
                    return listing
                # Past every key under this prefix (all of them are > after).
                after_key, from_key = None, upper
                jumped = True
                break
            if listing.count == max_keys:
                listing.truncated = True
                return listing
            listing.objects.append(info)
            listing.last = info.key
            after_key, from_key = info.key, None
        if not jumped and len(batch) < wanted:
            break
    return listing
