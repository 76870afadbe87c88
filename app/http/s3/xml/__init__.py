"""S3 XML: response documents and request-body parsers, in the S3 namespace
``http://s3.amazonaws.com/doc/2006-03-01/``.

* :mod:`app.http.s3.xml.writer` -- the tiny writer every document uses (escaping,
  URL-encoded keys, quoted ETags) and the values documents share (owner,
  checksum, the ``null`` version id, :func:`~app.http.s3.xml.writer.iso8601` times);
* :mod:`app.http.s3.xml.listings` -- ListBuckets, ListObjects (v1, v2, versions),
  ListParts, ListMultipartUploads;
* :mod:`app.http.s3.xml.responses` -- ``<Error>`` and the results of single
  operations (copies, multipart, GetObjectAttributes, DeleteObjects, bucket
  settings);
* :mod:`app.http.s3.xml.parsing` -- request bodies, parsed with defusedxml.

Builders are plain functions taking values (or small dataclasses) and
returning the UTF-8 document, XML declaration included. Times in XML are
``2026-11-30T08:00:00.000Z``; ``Last-Modified`` headers use
:func:`app.http.shared.conditions.http_date`.
"""
