"""The object store: files cut into chunks, written, read back verified, and kept (GC, scrub)."""
