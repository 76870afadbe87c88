"""The route a request is counted under in /metrics and named by in its
`http_request` log line.

FastAPI puts the route it matched in the scope, and its path template is the
label (`/api/files/{name:path}`). The S3 API's requests never reach FastAPI's
router: the gateway answers them, and labels them by the handler of its route
table that served them (`s3:get_object`, `s3:list_objects_v2`), or `s3` when
one was refused before a handler was chosen (a bad signature). Without it every
S3 request was `unmatched`, so a slow listing and a fast HEAD looked alike.
Labels come from code, never from the request, so their number stays small.
"""

from __future__ import annotations

from starlette.types import Scope

#: Where a handler outside FastAPI's router leaves its label.
_LABEL = "teleuploader.route"


def set_route_label(scope: Scope, label: str) -> None:
    scope[_LABEL] = label


def route_label(scope: Scope) -> str:
    """The label set for this request, else FastAPI's route template, else
    `unmatched` (a 404 of no route)."""
    label: str | None = scope.get(_LABEL)
    if label is None:
        label = getattr(scope.get("route"), "path", None)
    return label or "unmatched"
