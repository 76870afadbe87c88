"""Building blocks that know nothing of files, bots or chats: periodic loops, jitter,
checksums, bodies sent in pieces, logging and the uvicorn server they run under."""
