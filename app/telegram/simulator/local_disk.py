"""The disk of a simulated `--local` Bot API server (`SimulatorConfig.local_dir`).

What telegram-bot-api does in local mode, and so what this does:

* each bot's files live under `<--dir>/<token>/` (Client.cpp, the `dir_` of
  Client::start_up: the token, its ':' written '~' where the file system
  refuses colons, which telegram-bot-api.cpp probes at start); the
  documents a getFile fetched are in its `documents/` directory;
* getFile downloads the file there and answers its **absolute** path
  (Client.cpp, json_store_file with local_mode_): the bot reads the file
  itself, as the maintainers say (telegram-bot-api issues #283, #345, #540).

The path a getFile answers is the path as the server sees it (`local_dir`);
the bytes land in `local_volume` when a test plays a container whose
`--dir` the service sees elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.telegram.simulator.config import SimulatorConfig


class LocalDisk:
    """Where a local server's getFile puts a file, and the path it answers."""

    def __init__(self, config: SimulatorConfig) -> None:
        assert config.local_dir is not None
        self._server_dir = config.local_dir.rstrip("/")
        self._volume = Path(config.local_volume or config.local_dir)
        self._colon = config.allow_colon_in_filenames

    def bot_dir(self, token: str) -> str:
        """The name of a bot's directory: its token."""
        return token if self._colon else token.replace(":", "~")

    def paths(self, token: str, name: str) -> tuple[str, Path]:
        """(the absolute path getFile answers, where the bytes are on this
        machine) of the document `name` of a bot."""
        relative = f"{self.bot_dir(token)}/documents/{name}"
        return f"{self._server_dir}/{relative}", self._volume / relative

    def write(self, where: Path, data: bytes) -> None:
        """The file as the server's download leaves it: whole, in place."""
        where.parent.mkdir(parents=True, exist_ok=True)
        partial = where.with_name(where.name + ".part")
        partial.write_bytes(data)
        os.replace(partial, where)

    def holds(self, where: Path) -> bool:
        return where.is_file()

    def files(self) -> list[Path]:
        """Every file the server keeps on its disk now."""
        return sorted(path for path in self._volume.rglob("*") if path.is_file())
