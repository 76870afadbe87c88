"""While the service drains after SIGTERM, new writes get 503 with Retry-After
and reads go on. `app.state.draining` is what the signal handler of
`app.serving.run_server` sets; tests/deploy/test_shutdown.py sends the real
signal to the real process."""

from __future__ import annotations

import pytest

from tests.running_service import CHUNK, Service, payload

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


async def test_while_draining_writes_get_503_with_retry_after_and_reads_go_on(
    service: Service,
) -> None:
    data = payload(2 * CHUNK, seed=5)
    async with service.client() as http:
        stored = await http.put("/api/files/kept.bin", content=data, headers=service.auth)
        assert stored.status_code == 201, stored.text
        public_id = stored.json()["public_id"]
        messages = service.live_messages()

        service.app.state.draining = True
        writes = [
            await http.put("/api/files/new.bin", content=payload(CHUNK), headers=service.auth),
            await http.post(
                "/api/upload",
                # Prebuilt: httpx would send a `files=` body in several writes,
                # and the server, which answers without reading it, hangs up
                # on the later ones before this client (on the same event
                # loop) reads the answer.
                content=(
                    b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
                    b"\r\nabc\r\n--b--\r\n"
                ),
                headers={**service.auth, "Content-Type": "multipart/form-data; boundary=b"},
            ),
            await http.delete(f"/api/files/{public_id}", headers=service.auth),
        ]
        read = await http.get(f"/f/{public_id}")
        info = await http.get(f"/file/{public_id}/info")

    for response in writes:
        assert response.status_code == 503, response.text
        assert response.headers["retry-after"] == "5"
        assert response.json()["error"] == "shutting_down"
    assert read.status_code == 200
    assert read.content == data
    assert info.status_code == 200
    assert service.live_messages() == messages  # nothing was written to Telegram
