"""The id of a new multipart or resumable upload.

Its own module because three repositories make uploads (multipart, resumable,
and pending objects' hidden ones), and the multipart one imports the other
two's modules: with the id there, they imported each other in a circle.
"""

from __future__ import annotations

import secrets


def new_upload_id() -> str:
    """43 URL-safe characters, 256 random bits."""
    return secrets.token_urlsafe(32)
