"""`teleuploader trash list` and `teleuploader trash restore ID [--as NAME]`:
the trash of a running service (GET /api/trash, POST /api/trash/{id}/restore),
with the key's own rights (a `write` key: its own files; `admin`: everything).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from app.kit.bidi import escape_controls

Handler = Callable[[argparse.Namespace], int]


def add_trash_commands(
    commands: Any, client_options: Callable[[argparse.ArgumentParser], None]
) -> None:
    """Register `trash list` and `trash restore` on the CLI's subparsers."""
    trash = commands.add_parser(
        "trash", help="list or restore deleted and replaced files (TRASH_RETENTION_SECONDS)"
    )
    actions = trash.add_subparsers(title="trash commands", metavar="ACTION")
    listing = actions.add_parser("list", help="what your key may restore, newest first")
    listing.add_argument("--json", action="store_true", help="one JSON line per object")
    client_options(listing)
    listing.set_defaults(handler=cmd_trash_list)
    restore = actions.add_parser("restore", help="put an object back under its old name")
    restore.add_argument("public_id", metavar="ID", help="its public id, as `trash list` shows")
    restore.add_argument(
        "--as", dest="as_name", metavar="NAME", help="restore under this name (or S3 key) instead"
    )
    client_options(restore)
    restore.set_defaults(handler=cmd_trash_restore)

    def usage(_args: argparse.Namespace) -> int:
        trash.print_help()
        return 2

    trash.set_defaults(handler=usage)


def _request(args: argparse.Namespace, method: str, path: str, **params: str) -> Any:
    """The JSON answer of a call to the service; ClientError if it refuses."""
    import httpx

    from app.cli.client import ClientError, explain

    if not args.key:
        raise ClientError("an API key is needed: --key or TELEUPLOADER_KEY")
    headers = {"Authorization": f"Bearer {args.key}"}
    try:
        with httpx.Client(base_url=args.url, headers=headers, timeout=30) as http:
            response = http.request(method, path, params=params)
    except httpx.HTTPError as exc:
        raise ClientError(f"cannot reach {args.url}: {exc}") from None
    if response.status_code != 200:
        raise ClientError(explain(response))
    return response.json()


def _where(item: dict[str, Any]) -> str:
    """Where an item lives, for a terminal: an S3 key may hold anything, ESC
    included, so its control characters are spelt out."""
    if item.get("bucket"):
        return escape_controls(f"s3://{item['bucket']}/{item['key']}")
    return escape_controls(str(item["name"]))


def cmd_trash_list(args: argparse.Namespace) -> int:
    cursor: str | None = None
    while True:
        page = _request(args, "GET", "/api/trash", **({"cursor": cursor} if cursor else {}))
        for item in page["items"]:
            if args.json:
                print(json.dumps(item))
            else:
                print(
                    f"{item['public_id']}  {item['reason']:<8}  {item['size_bytes']:>12}  "
                    f"until {item['expires_at']}  {_where(item)}"
                )
        cursor = page["next_cursor"]
        if cursor is None:
            return 0


def cmd_trash_restore(args: argparse.Namespace) -> int:
    params = {"as": args.as_name} if args.as_name is not None else {}
    restored = _request(
        args, "POST", f"/api/trash/{quote(args.public_id, safe='')}/restore", **params
    )
    print(restored["download_url"] or _where(restored))
    return 0
