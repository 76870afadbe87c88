"""Settings: validation, one name per setting (renamed ones refused in a line),
secrets masked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from app.config.settings import (
    MAX_CHUNK_SIZE,
    BotToken,
    SettingsError,
    load_settings,
    retired_settings,
)

T1 = "123456:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
T2 = "654321:BBHdqTcvCH1vGWJxfSeofSAs0K5PALDsbw"
# A local Bot API server (--local), beside the service.
LOCAL_API = "http://127.0.0.1:8081"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: pytest.TempPathFactory) -> None:
    for name in (
        "BOT_TOKENS",
        "BOT_TOKEN",
        "ADDITIONAL_BOT_TOKENS",
        "STORAGE_CHAT_ID",
        "STORAGE_CHANNEL_ID",
        "STORAGE_CHAT_IDS",
        "CHUNK_SIZE",
        "TELEGRAM_CHUNK_SIZE_BYTES",
        "BASE_URL",
        "PUBLIC_BASE_URL",
        "TELEGRAM_LOCAL_SERVER",
        "TELEGRAM_LOCAL_PATH_MAP",
        "TELEGRAM_API_BASE",
        "LOG_LEVEL",
        "DOWNLOAD_BUFFER_BYTES",
        "DOWNLOAD_CONNECTIONS",
        "DOWNLOAD_STALL_SECONDS",
        "UPLOAD_BUFFER_CHUNKS",
        "SPOOL_DIR",
        "SPOOL_MAX_BYTES",
        "STATE_DIRECTORY",
        "S3_CREDENTIALS",
        "S3_ACCESS_KEY_ID",
        "S3_SECRET_ACCESS_KEY",
        "BOT_LEASE_SECONDS",
        "S3_MIN_PART_SIZE",
        "ENCRYPTION_KEYS",
        "ENCRYPTION_KEYS_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env


def test_defaults() -> None:
    settings = load_settings()
    assert settings.port == 4000
    assert settings.chunk_size == MAX_CHUNK_SIZE == 19_922_944
    assert settings.max_attempts == 10
    assert settings.database_url == "sqlite+aiosqlite:///./teleuploader.db"
    assert settings.telegram_api_base == "https://api.telegram.org"


def test_tokens_are_parsed_deduplicated_and_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_TOKENS", f"{T1}, {T2},{T1}")
    settings = load_settings()
    assert settings.bot_ids == [123456, 654321]
    dump = repr(settings) + str(settings.model_dump())
    assert "AAHdq" not in repr(settings)
    assert "123456:***" in dump


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("BOT_TOKEN", "BOT_TOKENS"),
        ("ADDITIONAL_BOT_TOKENS", "BOT_TOKENS"),
        ("STORAGE_CHANNEL_ID", "STORAGE_CHAT_ID"),
        ("TELEGRAM_CHUNK_SIZE_BYTES", "CHUNK_SIZE"),
        ("BASE_URL", "PUBLIC_BASE_URL"),
        ("S3_ACCESS_KEY_ID", "S3_CREDENTIALS"),
        ("S3_SECRET_ACCESS_KEY", "S3_CREDENTIALS"),
    ],
)
def test_a_renamed_setting_is_refused_in_one_line_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, old: str, new: str
) -> None:
    """One name per setting: a value under an old name would be lost in
    silence, so it stops the start, in the environment as in .env."""
    monkeypatch.setenv(old, "1234")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith(f"{old} is no longer read: set {new} instead")
    assert "\n" not in message and "1234" not in message
    monkeypatch.delenv(old)
    (tmp_path / ".env").write_text(f"{old}=1234\n")
    with pytest.raises(SettingsError, match=f"^{old} is no longer read"):
        load_settings()


def test_an_old_name_beside_its_new_one_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """BASE_URL may mean something to another program on the host."""
    monkeypatch.setenv("BASE_URL", "https://elsewhere.example.com")
    monkeypatch.setenv("PUBLIC_BASE_URL", "https://files.example.com")
    assert load_settings().public_base_url == "https://files.example.com"


def test_retired_timers_are_named_for_a_warning_and_ignored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BOT_LEASE_SECONDS", "30")
    monkeypatch.setenv("S3_MIN_PART_SIZE", "0")
    settings = load_settings()
    assert retired_settings() == ["BOT_LEASE_SECONDS", "S3_MIN_PART_SIZE"]
    assert not hasattr(settings, "bot_lease_seconds")


@pytest.mark.parametrize("bad", ["nonsense", "12:short", "abc:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"])
def test_a_malformed_token_is_one_clear_line_without_the_secret(
    monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv("BOT_TOKENS", bad)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("invalid settings: BOT_TOKENS:")
    assert "\n" not in message
    assert bad.split(":")[-1] not in message


RULE = (
    "a token is <bot id>:<secret> as @BotFather gives it, the bot id 3 to 20 digits "
    "and the secret at least 20 of A-Z a-z 0-9 _ -"
)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (f"{T1},123456789:short", "token 2 of 2 (123456789:***): its secret is 5 characters long"),
        (f"12:{T1.split(':')[1]}", "token 1 of 1 (12:***): its bot id has 2 digits"),
        ("nonsense", "token 1 of 1: it has no ':'"),
        (
            f"{T2},{T1[:10]} {T1[10:]}",
            "token 2 of 2 (123456:***): its secret has a character other than A-Z a-z 0-9 _ -",
        ),
        (
            f'"{T1}"',
            "token 1 of 1: it is in quotes; values are taken literally, leave the quotes out",
        ),
        (f"abc:{T1.split(':')[1]}", "token 1 of 1: the part before ':' is not a bot id"),
    ],
)
def test_a_bad_token_says_which_one_and_what_is_wrong_with_it(
    monkeypatch: pytest.MonkeyPatch, tokens: str, expected: str
) -> None:
    monkeypatch.setenv("BOT_TOKENS", tokens)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == f"invalid settings: BOT_TOKENS: {expected} ({RULE})"


def test_two_tokens_for_one_bot_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BOT_TOKENS", f"{T1},123456:ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ")
    with pytest.raises(SettingsError, match="two different tokens are given for bot 123456"):
        load_settings()


def test_chunks_too_big_to_download_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNK_SIZE", str(MAX_CHUNK_SIZE + 1))
    with pytest.raises(SettingsError, match="CHUNK_SIZE=19922945 is above 19922944"):
        load_settings()
    monkeypatch.setenv("TELEGRAM_LOCAL_SERVER", "true")
    monkeypatch.setenv("TELEGRAM_API_BASE", LOCAL_API)
    assert load_settings().chunk_size == MAX_CHUNK_SIZE + 1


def test_a_local_server_with_the_cloud_base_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """api.telegram.org runs no --local server: its getFile caps downloads
    at 20 MiB, so chunks above it would upload and never be read back."""
    monkeypatch.setenv("TELEGRAM_LOCAL_SERVER", "true")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "TELEGRAM_LOCAL_SERVER=true needs TELEGRAM_API_BASE" in str(caught.value)
    assert "\n" not in str(caught.value)
    monkeypatch.setenv("TELEGRAM_API_BASE", "https://api.telegram.org/")
    with pytest.raises(SettingsError, match=r"not api\.telegram\.org"):
        load_settings()
    monkeypatch.setenv("TELEGRAM_API_BASE", LOCAL_API)
    assert load_settings().telegram_local_server is True


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/var/lib/telegram-bot-api:/srv/tba", ("/var/lib/telegram-bot-api", "/srv/tba")),
        (" /var/lib/tba/ : /mnt/tba/ ", ("/var/lib/tba", "/mnt/tba")),
        ("/:/mnt", ("/", "/mnt")),
    ],
)
def test_the_local_path_map_is_the_servers_dir_then_ours(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, str]
) -> None:
    monkeypatch.setenv("TELEGRAM_LOCAL_SERVER", "true")
    monkeypatch.setenv("TELEGRAM_API_BASE", LOCAL_API)
    monkeypatch.setenv("TELEGRAM_LOCAL_PATH_MAP", value)
    assert load_settings().telegram_local_path_map == expected


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        (
            {"TELEGRAM_LOCAL_PATH_MAP": "/a"},
            "TELEGRAM_LOCAL_PATH_MAP: expected SERVER_DIR:LOCAL_DIR",
        ),
        ({"TELEGRAM_LOCAL_PATH_MAP": "a:/b"}, "TELEGRAM_LOCAL_PATH_MAP: SERVER_DIR and LOCAL_DIR"),
        (
            {"TELEGRAM_LOCAL_SERVER": "false", "TELEGRAM_LOCAL_PATH_MAP": "/a:/b"},
            "TELEGRAM_LOCAL_PATH_MAP is for a local Bot API server",
        ),
    ],
)
def test_a_bad_local_path_map_is_refused_in_one_line(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], says: str
) -> None:
    monkeypatch.setenv("TELEGRAM_LOCAL_SERVER", "true")
    monkeypatch.setenv("TELEGRAM_API_BASE", LOCAL_API)
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=says):
        load_settings()


def test_a_bad_number_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHUNK_SIZE", "lots")
    with pytest.raises(SettingsError, match=r"^invalid settings: CHUNK_SIZE: "):
        load_settings()


def test_token_parse_keeps_only_the_id_in_text() -> None:
    token = BotToken.parse(T1)
    assert token.bot_id == 123456
    assert token.value == T1
    assert str(token) == repr(token).removeprefix("BotToken(").removesuffix(")") == "123456:***"


def test_s3_credentials_are_pairs_with_real_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "S3_CREDENTIALS", "registry:a-long-random-secret-1, gitea:another-long-secret-2"
    )
    settings = load_settings()
    secrets = {key: value.get_secret_value() for key, value in settings.s3_credentials.items()}
    assert secrets == {"registry": "a-long-random-secret-1", "gitea": "another-long-secret-2"}
    assert "a-long-random-secret-1" not in repr(settings)


@pytest.mark.parametrize(
    "value", ["registry:tooshort1", "registry:", "registry", "x:a-long-random-secret-1"]
)
def test_an_s3_pair_without_a_real_secret_is_refused(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("S3_CREDENTIALS", value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert message.startswith("invalid settings: S3_CREDENTIALS:")
    assert "\n" not in message
    secret = value.partition(":")[2]
    assert not secret or secret not in message


def test_download_budget_defaults() -> None:
    settings = load_settings()
    assert settings.download_buffer_bytes == 64 * 1024 * 1024
    assert settings.download_connections == 32
    assert settings.download_stall_seconds == 60


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("DOWNLOAD_BUFFER_BYTES", "0"),
        ("DOWNLOAD_CONNECTIONS", "0"),
        ("DOWNLOAD_STALL_SECONDS", "0"),
        ("DOWNLOAD_STALL_SECONDS", "soon"),
    ],
)
def test_download_budget_settings_must_be_positive(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=rf"^invalid settings: {name}: "):
        load_settings()


def test_upload_budget_and_spool_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BOT_TOKENS", f"{T1},{T2}")
    monkeypatch.setenv("DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/db/t.db")
    settings = load_settings()
    assert settings.upload_buffers == 2 * 2 + 2
    assert settings.spool_max_bytes == 8 * 1024**3
    assert settings.spool_path == tmp_path / "db" / "spool"
    # Under systemd's StateDirectory=, the spool lives there.
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))
    assert load_settings().spool_path == tmp_path / "state" / "spool"
    monkeypatch.setenv("UPLOAD_BUFFER_CHUNKS", "3")
    assert load_settings().upload_buffers == 3


@pytest.mark.parametrize(
    ("name", "value"), [("UPLOAD_BUFFER_CHUNKS", "0"), ("SPOOL_MAX_BYTES", "-1")]
)
def test_upload_budget_and_spool_limits_are_checked(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=rf"^invalid settings: {name}: "):
        load_settings()


def test_several_storage_chats_are_a_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_CHAT_IDS", "-1001, -1002 ,-1003")
    assert load_settings().chat_ids == [-1001, -1002, -1003]
    # The one-chat form still works alone, and both may be set if they agree.
    monkeypatch.delenv("STORAGE_CHAT_IDS")
    monkeypatch.setenv("STORAGE_CHAT_ID", "-1001")
    assert load_settings().chat_ids == [-1001]
    monkeypatch.setenv("STORAGE_CHAT_IDS", "-1001")
    assert load_settings().chat_ids == [-1001]


@pytest.mark.parametrize(
    ("one", "many", "message"),
    [
        ("-1001", "-1001,-1002", "STORAGE_CHAT_ID and STORAGE_CHAT_IDS are both set and disagree"),
        ("-1009", "-1001", "STORAGE_CHAT_ID and STORAGE_CHAT_IDS are both set and disagree"),
        (None, "-1001,-1001", "STORAGE_CHAT_IDS: chat -1001 is given twice"),
        (None, "-1001,channel", "STORAGE_CHAT_IDS: 'channel' is not a chat id"),
    ],
)
def test_storage_chats_that_contradict_are_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, one: str | None, many: str, message: str
) -> None:
    if one is not None:
        monkeypatch.setenv("STORAGE_CHAT_ID", one)
    monkeypatch.setenv("STORAGE_CHAT_IDS", many)
    with pytest.raises(SettingsError, match=message):
        load_settings()


KEY = "k1:" + base64.b64encode(bytes(range(32))).decode()


def test_master_keys_from_the_environment_or_a_credentials_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert load_settings().keyring() is None
    monkeypatch.setenv("ENCRYPTION_KEYS", f"{KEY},k0:{KEY[3:]}")
    keyring = load_settings().keyring()
    assert keyring is not None and keyring.ids == ("k1", "k0")
    assert KEY[3:] not in repr(load_settings())
    monkeypatch.delenv("ENCRYPTION_KEYS")
    credential = tmp_path / "encryption-keys"
    credential.write_text(f"# newest first\n{KEY}\n")
    monkeypatch.setenv("ENCRYPTION_KEYS_FILE", str(credential))
    keyring = load_settings().keyring()
    assert keyring is not None and keyring.current.id == "k1"


@pytest.mark.parametrize(
    ("variables", "says"),
    [
        ({"ENCRYPTION_KEYS": KEY[:-6] + "====="}, "ENCRYPTION_KEYS: entry 1 (id k1): the key is"),
        ({"ENCRYPTION_KEYS": KEY[3:]}, "ENCRYPTION_KEYS: entry 1 is not of the form"),
        ({"ENCRYPTION_KEYS": KEY, "ENCRYPTION_KEYS_FILE": "/k"}, "both set: keep one"),
        ({"ENCRYPTION_KEYS_FILE": "/nonexistent/keys"}, "cannot be read: No such file"),
        (
            {
                "ENCRYPTION_KEYS": KEY,
                "TELEGRAM_LOCAL_SERVER": "true",
                "TELEGRAM_API_BASE": LOCAL_API,
                "CHUNK_SIZE": str(2 * 10**9),
            },
            "CHUNK_SIZE is at most 1999511824",
        ),
    ],
)
def test_bad_master_keys_stop_the_start_in_one_line_without_the_key(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], says: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert says in message and "\n" not in message
    assert KEY[3:15] not in message and KEY[20:30] not in message
