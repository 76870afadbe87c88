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
capability to download its file, and logs are read by more people and
programs than should have every file. `logged_path` names one by its first
PUBLIC_ID_SHOWN characters: enough to find it (with the time) in the
database, not to fetch it.
"""

from __future__ import annotations

from starlette.types import Scope

#: Where a handler outside FastAPI's router leaves its label.
_LABEL = "teleuploader.route"
#: The characters of a public id a log line shows (24 bits of its 144).
PUBLIC_ID_SHOWN = 4


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
    """The request's path as a log line names it: a public id in it (a
    route's `public_id`) cut to its first PUBLIC_ID_SHOWN characters."""
    path: str = scope.get("path", "")
    public_id = scope.get("path_params", {}).get("public_id")
    if isinstance(public_id, str) and public_id:
        path = path.replace(public_id, public_id[:PUBLIC_ID_SHOWN] + "…")
    return path
