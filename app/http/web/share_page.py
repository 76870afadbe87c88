"""The HTML of a share's pages (`/s/{token}`): a file, a folder, the
password form, and the short pages that say why a link stopped working.

Written on the server, every value escaped (`html.escape`), with no inline
script or style: the page's Content-Security-Policy (app/http/web/routes.py)
holds, and its one script, /static/share.js, only adds the preview a
visitor asks for. Nothing on these pages loads a byte of the shared file
by itself: a page view never counts as a download.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import quote

from fastapi.responses import HTMLResponse

from app.http.web.routes import PAGE_HEADERS
from app.kit.bidi import escape_bidi

#: Kinds of preview the page offers, by Content-Type.
_TEXT_TYPES = (
    "application/json",
    "application/xml",
    "application/javascript",
    "application/x-yaml",
    "application/yaml",
    "application/toml",
)
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")


def preview_kind(content_type: str) -> str | None:
    """How the page shows a file of this type: image, video, audio, pdf,
    text, or None (download only)."""
    media = content_type.split(";", 1)[0].strip().lower()
    major = media.split("/", 1)[0]
    if major in ("image", "video", "audio"):
        return major
    if media == "application/pdf":
        return "pdf"
    if major == "text" or media in _TEXT_TYPES or media.endswith(("+json", "+xml")):
        return "text"
    return None


def format_bytes(size: int) -> str:
    value = float(size)
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{size} {'byte' if size == 1 else 'bytes'}"
    return f"{value:.1f} {_UNITS[unit]}" if value < 10 else f"{value:.0f} {_UNITS[unit]}"


def _time(moment: datetime) -> str:
    text = moment.strftime("%Y-%m-%d %H:%M UTC")
    return f'<time datetime="{escape(moment.isoformat())}">{escape(text)}</time>'


def _text(value: str) -> str:
    """A name as shown: bidi controls spelt out, then escaped."""
    return escape(escape_bidi(value))


def _document(title: str, main: str) -> str:
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n'
        '  <meta charset="utf-8">\n'
        '  <meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '  <meta name="robots" content="noindex, nofollow">\n'
        f"  <title>{_text(title)} · TeleUploader</title>\n"
        '  <link rel="icon" href="/static/icon.svg" type="image/svg+xml">\n'
        '  <link rel="stylesheet" href="/static/app.css">\n'
        '  <script type="module" src="/static/share.js"></script>\n'
        "</head>\n<body>\n"
        '  <header class="bar"><h1><img src="/static/icon.svg" alt="" width="24" '
        'height="24"> TeleUploader</h1></header>\n'
        f'  <main id="main" class="share">\n{main}\n  </main>\n'
        "</body>\n</html>\n"
    )


def html_page(
    title: str, main: str, *, status: int = 200, headers: dict[str, str] | None = None
) -> HTMLResponse:
    return HTMLResponse(
        _document(title, main),
        status_code=status,
        headers={**PAGE_HEADERS, "X-Robots-Tag": "noindex", **(headers or {})},
    )


def refusal(
    status: int, heading: str, sentence: str, headers: dict[str, str] | None = None
) -> HTMLResponse:
    """A short page saying why the link does not work."""
    main = (
        f'    <section class="card share-card" aria-labelledby="why">\n'
        f'      <h2 id="why">{escape(heading)}</h2>\n'
        f"      <p>{escape(sentence)}</p>\n"
        "    </section>"
    )
    return html_page(heading, main, status=status, headers=headers)


def _facts(rows: list[tuple[str, str]]) -> str:
    items = "".join(f"<dt>{escape(name)}</dt><dd>{value}</dd>" for name, value in rows)
    return f'      <dl class="facts">{items}</dl>\n'


def _limits(expires_at: datetime | None, left: int | None) -> list[tuple[str, str]]:
    rows = [("Available until", _time(expires_at) if expires_at else "no expiry")]
    if left is not None:
        rows.append(("Downloads left", escape(str(left))))
    return rows


def preview_button(kind: str | None, view_url: str, name: str, content_type: str) -> str:
    if kind is None:
        return ""
    return (
        f'<button type="button" class="preview" data-kind="{kind}" '
        f'data-src="{escape(view_url)}" data-name="{_text(name)}" '
        f'data-type="{escape(content_type)}" aria-label="Preview {_text(name)}">Preview</button>'
    )


def file_page(
    *,
    name: str,
    size: int,
    content_type: str,
    download_url: str,
    view_url: str,
    expires_at: datetime | None,
    left: int | None,
) -> HTMLResponse:
    kind = preview_kind(content_type)
    main = (
        '    <section class="card share-card" aria-labelledby="shared-name">\n'
        '      <p class="hint">A file shared with you</p>\n'
        f'      <h2 id="shared-name" class="share-name">{_text(name)}</h2>\n'
        + _facts(
            [
                ("Size", escape(format_bytes(size))),
                ("Type", escape(content_type)),
                *_limits(expires_at, left),
            ]
        )
        + '      <p class="share-actions">'
        f'<a class="button primary" href="{escape(download_url)}" download>Download</a> '
        + preview_button(kind, view_url, name, content_type)
        + "</p>\n"
        '      <div id="preview" class="preview-area" aria-live="polite"></div>\n'
        '      <p class="hint">A download, or a preview, counts once however many '
        "times a player seeks.</p>\n"
        "    </section>"
    )
    return html_page(name, main)


def folder_page(
    *,
    token: str,
    folder_name: str,
    path: str,
    folders: list[str],
    files: list[tuple[str, int, str]],
    more_after: str | None,
    expires_at: datetime | None,
    left: int | None,
) -> HTMLResponse:
    """The folder at `path` (relative to the shared folder, "" or ending in
    "/"): `folders` are sub-folder names, `files` (name, size, type)."""
    base = f"/s/{token}"
    crumbs = [f'<a href="{base}">{_text(folder_name)}</a>']
    walked = ""
    for part in [p for p in path.split("/") if p]:
        walked += part + "/"
        crumbs.append(f'<a href="{base}?path={quote(walked, safe="")}">{_text(part)}</a>')
    crumbs[-1] = crumbs[-1].replace("<a ", '<a aria-current="page" ', 1)
    rows: list[str] = []
    for sub in folders:
        href = f"{base}?path={quote(path + sub + '/', safe='')}"
        rows.append(
            f'<tr class="folder"><td class="name" data-label="Name">'
            f'<a href="{href}">{_text(sub)}/</a></td>'
            '<td data-label="Size">folder</td><td class="actions"></td></tr>'
        )
    for name, size, content_type in files:
        quoted = quote(path + name, safe="/")
        download = f"{base}/download/{quoted}"
        view = f"{base}/view/{quoted}"
        preview = preview_button(preview_kind(content_type), view, name, content_type)
        rows.append(
            f'<tr><td class="name" data-label="Name">{_text(name)}</td>'
            f'<td data-label="Size">{escape(format_bytes(size))}</td>'
            f'<td class="actions">{preview}'
            f'<a class="button" href="{escape(download)}" download '
            f'aria-label="Download {_text(name)}">Download</a></td></tr>'
        )
    more = ""
    if more_after is not None:
        query = f"path={quote(path, safe='')}&after={quote(more_after, safe='')}"
        more = f'      <p class="pager"><a class="button" href="{base}?{query}">More</a></p>\n'
    main = (
        '    <section class="card share-card" aria-labelledby="shared-name">\n'
        '      <p class="hint">A folder shared with you</p>\n'
        f'      <h2 id="shared-name" class="share-name">{_text(folder_name)}</h2>\n'
        + _facts(_limits(expires_at, left))
        + '      <p class="share-actions">'
        f'<a class="button primary" href="{base}/download" download>Download all (zip)</a></p>\n'
        f'      <nav class="crumbs" aria-label="Folder path">{" / ".join(crumbs)}</nav>\n'
        '      <div id="preview" class="preview-area" aria-live="polite"></div>\n'
        '      <table class="list">\n'
        '        <thead><tr><th scope="col">Name</th><th scope="col">Size</th>'
        '<th scope="col"><span class="visually-hidden">Actions</span></th></tr></thead>\n'
        f"        <tbody>{''.join(rows)}</tbody>\n"
        "      </table>\n" + more + "    </section>"
    )
    return html_page(folder_name, main)


def password_page(token: str, *, problem: str = "", status: int = 200) -> HTMLResponse:
    alert = f'<p class="error" role="alert">{escape(problem)}</p>' if problem else ""
    main = (
        '    <section class="card share-card" aria-labelledby="locked">\n'
        '      <h2 id="locked">This share needs a password</h2>\n'
        f'      <form class="signin" method="post" action="/s/{token}/unlock">\n'
        '        <label for="share-password">Password</label>\n'
        '        <input id="share-password" name="password" type="password" '
        'autocomplete="current-password" required>\n'
        '        <button type="submit" class="primary">Open</button>\n'
        f"        {alert}\n"
        "      </form>\n"
        '      <p class="hint">Scripts send it as HTTP Basic: '
        "<code>curl -u :PASSWORD -OJ …/download</code>.</p>\n"
        "    </section>"
    )
    return html_page("Password needed", main, status=status)
