"""`teleuploader share LINK|ID|FOLDER/ [--expires 7d] [--password ...]
[--max-downloads N]` prints a share link (POST /api/shares);
`teleuploader shares list` and `teleuploader shares revoke ID` (GET and
DELETE /api/shares) are the key's own shares (an admin key: everyone's).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

Handler = Callable[[argparse.Namespace], int]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^(\d{1,9})([smhdw]?)$")


def duration(text: str) -> int:
    """Seconds from "90", "90s", "30m", "12h", "7d" or "2w"."""
    match = _DURATION.match(text.strip().lower())
    if match is None or int(match.group(1)) == 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit (s, m, h, d, w), e.g. 7d"
        )
    return int(match.group(1)) * _UNITS[match.group(2) or "s"]


def add_share_commands(
    commands: Any, client_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Register `share` and `shares list|revoke` on the CLI's subparsers."""
    share = commands.add_parser(
        "share",
        help="make a share link for a file (its link or public id) or a folder (ending in /)",
    )
    share.add_argument(
        "target",
        metavar="LINK|ID|FOLDER/",
        help="a file's link or public id (as `upload` prints), or a folder: a name prefix "
        "ending in / (photos/2024/)",
    )
    share.add_argument(
        "--expires", type=duration, metavar="DURATION", help="e.g. 1h, 7d, 2w (default: never)"
    )
    share.add_argument("--password", help="asked for on the page; scripts send it as HTTP Basic")
    share.add_argument("--max-downloads", type=int, metavar="N", help="downloads allowed")
    share.add_argument(
        "--inline", action="store_true", help="let browsers show the file rather than save it"
    )
    share.add_argument("--json", action="store_true", help="print the share as JSON")
    client_options(share)
    share.set_defaults(handler=cmd_share)

    shares = commands.add_parser("shares", help="list or revoke your share links")
    actions = shares.add_subparsers(title="shares commands", metavar="ACTION")
    listing = actions.add_parser("list", help="your shares not revoked, newest first")
    listing.add_argument("--json", action="store_true", help="one JSON line per share")
    client_options(listing)
    listing.set_defaults(handler=cmd_shares_list)
    revoke = actions.add_parser("revoke", help="revoke a share: its link stops at once")
    revoke.add_argument("share_id", metavar="ID", type=int, help="its id, as `shares list` shows")
    client_options(revoke)
    revoke.set_defaults(handler=cmd_shares_revoke)

    def usage(_args: argparse.Namespace) -> int:
        shares.print_help()
        return 2

    shares.set_defaults(handler=usage)


def _request(
    args: argparse.Namespace,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    params: dict[str, str] | None = None,
) -> Any:
    """The JSON answer of a call to the service (None for 204); ClientError
    if it refuses."""
    import httpx

    from app.cli.client import ClientError, explain

    if not args.key:
        raise ClientError("an API key is needed: --key or TELEUPLOADER_KEY")
    headers = {"Authorization": f"Bearer {args.key}"}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=30) as http:
            response = http.request(method, path, json=body, params=params)
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach {args.url}: {exc}") from None
    if response.status_code >= 300:
        raise ClientError(explain(response))
    return None if response.status_code == 204 else response.json()


def _target(target: str) -> dict[str, str]:
    if target.endswith("/") and "/f/" not in target:
        return {"folder": target}
    match = re.search(r"/f/([A-Za-z0-9_-]+)", target)
    return {"file": match.group(1) if match else target}


def cmd_share(args: argparse.Namespace) -> int:
    body: dict[str, Any] = _target(args.target)
    if args.expires is not None:
        body["expires_in"] = args.expires
    if args.password is not None:
        body["password"] = args.password
    if args.max_downloads is not None:
        body["max_downloads"] = args.max_downloads
    if args.inline:
        body["disposition"] = "inline"
    made = _request(args, "POST", "/api/shares", body=body)
    print(json.dumps(made) if args.json else made["url"])
    return 0


def _what(share: dict[str, Any]) -> str:
    if share["kind"] == "folder":
        return f"{share['folder']} (folder)"
    return str(share["name"] or f"{share['file']} (not available)")


def cmd_shares_list(args: argparse.Namespace) -> int:
    cursor: str | None = None
    while True:
        page = _request(args, "GET", "/api/shares", params={"cursor": cursor} if cursor else None)
        for share in page["items"]:
            if args.json:
                print(json.dumps(share))
                continue
            used = share["downloads"]
            if share["max_downloads"] is not None:
                used = f"{used}/{share['max_downloads']}"
            expires = share["expires_at"] or "never"
            print(
                f"{share['id']:>6}  {share['state']:<11}  {used!s:>9}  until {expires}  "
                f"{_what(share)}  {share['url']}"
            )
        cursor = page["next_cursor"]
        if cursor is None:
            return 0


def cmd_shares_revoke(args: argparse.Namespace) -> int:
    _request(args, "DELETE", f"/api/shares/{args.share_id}")
    print(f"revoked share {args.share_id}", file=sys.stderr)
    return 0
