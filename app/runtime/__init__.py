"""The running service: the FastAPI app, how its parts start and stop, systemd's view of it."""
