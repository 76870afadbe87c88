"""WebDAV (RFC 4918, classes 1 and 2) at /dav/, over the native files stored by name."""
