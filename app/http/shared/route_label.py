"""The route a request is counted under in /metrics and named by in its
`http_request` log line, and the path other log lines name it by.

FastAPI puts the route it matched in the scope, and its path template is the
label (`/api/files/{name:path}`). The S3 API's requests never reach FastAPI's
router: the gateway answers them, and labels them by the handler of its route
table that served them (`s3:get_object`, `s3:list_objects_v2`), or `s3` when
one was refused before a handler was chosen (a bad signature). Without it every
S3 request was `unmatched`, so a slow listing and a fast HEAD looked alike.
Labels come from code, never from the request, so their number stays small.

A log is no place for links (docs/security.md, "Logs"): a public id is the
capability to download its file, a share link's token that of its share, and
logs are read by more people and programs than should have every file.
`logged_path` names one by its first CAPABILITY_SHOWN characters: enough to
find it (with the time) in the database, not to fetch it.
"""

from __future__ import annotations

import re

from starlette.types import Scope

#: Where a handler outside FastAPI's router leaves its label.
_LABEL = "teleuploader.route"
#: The characters of a capability a log line shows (24 bits of a public
#: id's 144, of a share token's 256).
CAPABILITY_SHOWN = 4
#: The path parameters that are capabilities: a file's public id, a share's token.
_CAPABILITIES = ("public_id", "token")
#: The same in a path no route matched (its parameters are unknown).
_CAPABILITY_PATH = re.compile(r"^(/f/|/file/|/s/)([^/]+)")


def set_route_label(scope: Scope, label: str) -> None:
    scope[_LABEL] = label


def route_label(scope: Scope) -> str:
    """The label set for this request, else FastAPI's route template, else
    `unmatched` (a 404 of no route)."""
    label: str | None = scope.get(_LABEL)
    if label is None:
        label = getattr(scope.get("route"), "path", None)
    return label or "unmatched"


def logged_path(scope: Scope) -> str:
    """The request's path as a log line names it: a capability in it (a
    route's `public_id` or `token`, or what stands where they would) cut to
    its first CAPABILITY_SHOWN characters."""
    path: str = scope.get("path", "")
    params = scope.get("path_params") or {}
    found = False
    for name in _CAPABILITIES:
        value = params.get(name)
        if isinstance(value, str) and value:
            path = path.replace(value, value[:CAPABILITY_SHOWN] + "…")
            found = True
    if not found:
        path = _CAPABILITY_PATH.sub(
            lambda match: match[1] + match[2][:CAPABILITY_SHOWN] + "…", path, count=1
        )
    return path
