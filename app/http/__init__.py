"""Rules both HTTP APIs (native and S3) share."""
