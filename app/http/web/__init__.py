"""The web page at `/`: plain HTML, CSS and JavaScript served by the service
itself (no CDN, no build step), talking to the native API, /api/tus/ and the
page's JSON endpoints (app/http/api/session.py, status.py, browse.py)."""
