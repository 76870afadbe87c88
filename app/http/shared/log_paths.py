"""Request paths as log lines may show them: a share link's token is its
capability, so `/s/<token>/...` is logged as `/s/{token}/...`.

Requests are logged by their route's template already (app.http.shared.route_label);
this covers the log lines that name the path itself (errors, disconnects).
"""

from __future__ import annotations

import re

_SHARE = re.compile(r"^/s/[^/]*")


def loggable_path(path: str) -> str:
    return _SHARE.sub("/s/{token}", path, count=1)
