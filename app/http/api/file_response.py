"""One answer to a download of a stored file, for the routes that serve them
(`/f/{id}`, and a share's `/s/{token}/download` and `/view`): ETag and
Last-Modified, a single Range (206, 416), If-None-Match and
If-Modified-Since (304), If-Range, HEAD; the headers that keep a file from
acting on the service's origin (app.http.shared.active_content).

`plan_download` decides the answer without reading any byte; the route
then sends the plan's `bodiless` answer, or streams `[start, end)`: a
share counts a download between the two (app/http/web/shares.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request, Response

from app.http.api.errors import ApiError
from app.http.shared.active_content import NATIVE_FILE_HEADERS
from app.http.shared.conditions import http_date, not_modified, range_applies
from app.http.shared.disposition import content_disposition
from app.http.shared.ranges import RangeNotSatisfiable, parse_range
from app.store.object_info import ObjectInfo


@dataclass(frozen=True, slots=True)
class DownloadPlan:
    status: int
    headers: dict[str, str]
    start: int
    end: int
    # The whole answer when no byte is sent (304, HEAD); None: stream the range.
    bodiless: Response | None


def plan_download(
    request: Request,
    info: ObjectInfo,
    *,
    disposition: str = "attachment",
    cache_control: str = "private, max-age=0, must-revalidate",
) -> DownloadPlan:
    headers = {
        "ETag": info.etag,
        "Last-Modified": http_date(info.updated_at),
        "Accept-Ranges": "bytes",
        # Shown or saved, a file is never a page, script or style sheet of
        # this origin, whatever its type (app.http.shared.active_content).
        "Content-Disposition": content_disposition(info.name, disposition),
        **NATIVE_FILE_HEADERS,
        "Cache-Control": cache_control,
    }
    if not_modified(request.headers, etag=info.etag, last_modified=info.updated_at):
        return DownloadPlan(304, headers, 0, 0, Response(status_code=304, headers=headers))
    byte_range = None
    if range_applies(request.headers, etag=info.etag, last_modified=info.updated_at):
        try:
            byte_range = parse_range(request.headers.get("range"), info.size)
        except RangeNotSatisfiable as exc:
            raise ApiError(
                416,
                "range_not_satisfiable",
                exc.detail,
                {"Content-Range": f"bytes */{info.size}"},
            ) from None
    start, end, status = 0, info.size, 200
    if byte_range is not None:
        start, end, status = byte_range.start, byte_range.end, 206
        headers["Content-Range"] = byte_range.content_range(info.size)
    headers["Content-Length"] = str(end - start)
    bodiless = None
    if request.method == "HEAD":
        bodiless = Response(status_code=status, headers=headers, media_type=info.content_type)
    return DownloadPlan(status, headers, start, end, bodiless)
