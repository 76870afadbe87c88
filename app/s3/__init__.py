"""The S3 protocol layer: pure functions, no routes and no database.

* :mod:`app.s3.errors` -- :class:`~app.s3.errors.S3Error` and the table of S3 error codes.
* :mod:`app.s3.sigv4` -- SigV4 verification of requests (header and presigned forms).
* :mod:`app.s3.payload` -- streaming body decoders: SHA-256/MD5/checksum verification
  and aws-chunked (signed and unsigned, with trailers).
* :mod:`app.s3.xml` -- response documents and defused request-body parsers.
* :mod:`app.s3.names` -- bucket-name and key validation, path splitting.

A route handles a request roughly like this::

    verified = sigv4.verify_request(
        request.method, scope["raw_path"], scope["query_string"], request.headers,
        credentials, now=datetime.now(UTC), region=settings.s3_region,
    )
    bucket, key = names.split_path(scope["raw_path"])
    result = payload.BodyResult()
    body = payload.request_body(request.stream(), verified, request.headers, result=result)
    ...  # stream `body` to temporary storage; commit only if it ended without S3Error

and answers an :class:`~app.s3.errors.S3Error` with ``xml.s3_error_xml(err)`` and
``err.status``.
"""
