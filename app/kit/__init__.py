"""Building blocks that know nothing of files, bots or chats: loops, jitter, checksums, logging."""
