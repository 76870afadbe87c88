"""The HTTP faces: native API and tus (api), S3 (s3), WebDAV (dav), the page
(web), and the rules they share."""
