"""Running TeleUploader in production: the systemd notification protocol.

`app.ops.sdnotify` speaks sd_notify (READY, STATUS, STOPPING, WATCHDOG) over the
datagram socket systemd names in `$NOTIFY_SOCKET`; `systemd_notify` is what the
app's lifespan wraps around the running service. The unit file, env example,
pgbouncer example and the Caddyfile live in `deploy/` and at the repo top.
"""
