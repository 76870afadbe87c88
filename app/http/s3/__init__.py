"""The S3 API. The protocol modules are pure functions (no routes, no database):

* :mod:`app.http.s3.errors` -- :class:`~app.http.s3.errors.S3Error` and the table of S3 error codes.
* :mod:`app.http.s3.sigv4` -- SigV4 verification of requests (header and presigned forms).
* :mod:`app.http.s3.payload` -- streaming body decoders: SHA-256/MD5/checksum verification
  (:mod:`app.http.s3.payload_checks`) and aws-chunked (:mod:`app.http.s3.aws_chunked`: signed
  and unsigned, with trailers).
* :mod:`app.http.s3.xml` -- response documents (writer, listings, responses) and defused
  request-body parsers (parsing).
* :mod:`app.http.s3.names` -- bucket-name and key validation, path splitting.

The HTTP surface, shaped like minio's cmd/ (one concept per module):

* :mod:`app.http.s3.gateway` -- the ASGI middleware: what is an S3 request, the
  signature check, errors rendered as ``<Error>`` documents.
* :mod:`app.http.s3.router` -- the route table: (method, level, sub-resource) -> handler.
* :mod:`app.http.s3.context` -- the verified request the handlers read.
* :mod:`app.http.s3.bucket_handlers`, :mod:`app.http.s3.object_handlers`,
  :mod:`app.http.s3.multipart_handlers` -- the operations, calling
  :class:`~app.http.s3.service.S3Service`.

Range and conditional-request rules are the native API's too (:mod:`app.http`).
"""
