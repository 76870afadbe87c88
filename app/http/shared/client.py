"""The client's address, which per-client limits count by.

uvicorn gives it from the connection, or, for a connection from 127.0.0.1
(Caddy), from the `X-Forwarded-For` Caddy set (`forwarded_allow_ips`): a
proxy elsewhere must be trusted the same way, or every client counts as it.
"""

from __future__ import annotations

from starlette.requests import HTTPConnection


def client_address(connection: HTTPConnection) -> str:
    """The address, or "" when the server knows none (a Unix socket)."""
    return connection.client.host if connection.client else ""
