"""TeleUploader: files stored in a private Telegram channel through a pool of bots."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed distribution's version (pyproject.toml), e.g. "0.1.0".
    __version__ = version("teleuploader")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
