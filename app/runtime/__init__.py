"""The running service: the FastAPI app, how its parts start and stop, and systemd's view of it."""
