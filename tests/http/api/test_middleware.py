"""While the service drains after SIGTERM, new writes get 503 with Retry-After
and reads go on. `app.state.draining` is what the signal handler of
`app.kit.serving.run_server` sets; tests/deploy/test_shutdown.py sends the real
signal to the real process."""

from __future__ import annotations

import pytest

from tests.running_service import CHUNK, Service, ServiceFactory, payload

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


@pytest.mark.parametrize(
    ("public_base_url", "hsts"),
    [("https://files.example.com", True), ("http://files.example.com", False), (None, False)],
)
async def test_https_public_base_url_turns_on_hsts_for_every_answer(
    start_service: ServiceFactory, public_base_url: str | None, hsts: bool
) -> None:
    service = await start_service(public_base_url=public_base_url)
    async with service.client() as http:
        answers = [
            await http.get("/health"),
            await http.get("/"),
            await http.get("/api/files"),  # 401
            await http.get("/no/such/route"),  # 404
        ]
    for response in answers:
        if hsts:
            assert response.headers["strict-transport-security"] == "max-age=31536000"
        else:
            assert "strict-transport-security" not in response.headers
