"""The `teleuploader` command: one module per command group (serve, keys, trash, the client...)."""
