"""Where a copy is read from (app/store/locator.py), as the official Bot API
server behaves: a path that 404s is old (ask getFile again), a bot out of a
copy's chat reads it through another bot's forward, and a file server that
is not what the settings say is a configuration error, never a lost copy."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from app.db.models import ChunkCopy
from app.db.session import session_scope
from app.store.services import Services
from app.telegram.simulator import SimulatorConfig, TelegramSimulator, make_tokens
from tests.running_service import CHAT_ID, CHUNK, Service, ServiceFactory, payload


def services_of(service: Service) -> Services:
    services: Services = service.app.state.services
    return services


async def put(service: Service, data: bytes) -> str:
    async with service.client() as http:
        response = await http.put("/api/files/f.bin", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    public_id: str = response.json()["public_id"]
    return public_id


async def copies(service: Service) -> list[ChunkCopy]:
    async with session_scope(services_of(service).sessionmaker) as session:
        return list(await session.scalars(select(ChunkCopy).order_by(ChunkCopy.id)))


def getfiles(service: Service, bot_id: int) -> int:
    return service.sim.stats()[bot_id].calls.get("getFile", 0)


async def test_a_path_the_file_server_no_longer_has_is_asked_for_again(
    start_service: ServiceFactory,
) -> None:
    """Telegram keeps a path at least an hour; past its end the file
    server answers 404, and getFile gives a new one. Before, that 404 took
    the copy for gone: with one copy, the object for lost."""
    service = await start_service()
    data = payload(2 * CHUNK, seed=3)
    public_id = await put(service, data)
    async with service.client() as http:
        assert (await http.get(f"/f/{public_id}")).content == data
        service.sim.advance_clock(3601)  # the paths this service keeps expire
        again = await http.get(f"/f/{public_id}")

    assert again.status_code == 200
    assert again.content == data
    assert {copy.state for copy in await copies(service)} == {"ok"}


async def test_a_bot_out_of_a_copys_chat_reads_it_through_another_bots_forward(
    start_service: ServiceFactory,
) -> None:
    """The server fetches a file through its message, which a bot kicked
    from the chat cannot read: it answers that bot's getFile as a failed
    download. Another bot forwards the message and reads it."""
    service = await start_service(bots=2)
    data = payload(2 * CHUNK, seed=4)
    public_id = await put(service, data)
    uploader = (await copies(service))[0].bot_id
    other = next(bot for bot in service.sim.bot_ids if bot != uploader)
    service.sim.kick(uploader, CHAT_ID)

    async with service.client() as http:
        unknown = await http.get(f"/f/{public_id}")  # the pool does not know yet
        # As app/telegram/attempts.py does when a call into the chat is refused.
        services_of(service).dispatcher.workers[uploader].chats.discard(CHAT_ID)
        asked_before = getfiles(service, uploader)
        known = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={CHUNK}-"})

    assert unknown.status_code == 200 and unknown.content == data
    assert known.status_code == 206 and known.content == data[CHUNK:]
    assert getfiles(service, uploader) == asked_before  # straight to the forward
    assert service.sim.stats()[other].calls.get("forwardMessage", 0) >= 1
    assert {copy.state for copy in await copies(service)} == {"ok"}


async def test_a_local_server_taken_for_the_cloud_is_a_configuration_error_not_a_lost_copy(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    """A --local server answers getFile with a path on its disk and serves
    no /file/ route (telegram-bot-api HttpConnection.cpp, Client.cpp):
    read as the cloud, every download failed and each copy was marked
    missing. Now a read is a 503 and the log says what to set."""
    sim = TelegramSimulator(
        SimulatorConfig(tokens=make_tokens(2), chat_ids=[CHAT_ID], local_dir=str(tmp_path))
    )
    service = await start_service(sim=sim)
    data = payload(2 * CHUNK, seed=5)
    public_id = await put(service, data)

    async with service.client() as http:
        answer = await http.get(f"/f/{public_id}")

    assert answer.status_code == 503
    assert answer.json()["error"] == "content_unavailable"
    assert {copy.state for copy in await copies(service)} == {"ok"}
    assert (await services_of(service).scrub.health()).objects_lost == 0


async def test_a_local_path_map_that_leads_nowhere_is_a_configuration_error_not_a_lost_copy(
    start_service: ServiceFactory, tmp_path: Path
) -> None:
    """Every path getFile gives is missing where the map says: asked again
    once, then FilesUnreachable (a 503), the copy untouched."""
    volume, elsewhere = tmp_path / "volume", tmp_path / "elsewhere"
    sim = TelegramSimulator(
        SimulatorConfig(
            tokens=make_tokens(2),
            chat_ids=[CHAT_ID],
            local_dir="/var/lib/telegram-bot-api",
            local_volume=str(volume),
        )
    )
    service = await start_service(
        sim=sim,
        telegram_local_server=True,
        telegram_local_path_map=("/var/lib/telegram-bot-api", str(elsewhere)),
    )
    data = payload(2 * CHUNK, seed=6)
    public_id = await put(service, data)

    async with service.client() as http:
        answer = await http.get(f"/f/{public_id}")

    assert answer.status_code == 503
    assert {copy.state for copy in await copies(service)} == {"ok"}
    uploader = (await copies(service))[0].bot_id
    assert getfiles(service, uploader) == 2  # the cached path, then one more
