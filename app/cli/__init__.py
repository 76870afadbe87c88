"""The `teleuploader` command: one module per command group (serve, keys, trash, snapshots, the client side...)."""
