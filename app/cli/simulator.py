"""`teleuploader telegram-sim`: the Telegram Bot API simulator as an HTTP
server of its own (app/telegram/simulator), for benches, demos and trying
the service without bot tokens."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.database import CliError

#: The storage chat the simulator serves when none is named.
DEFAULT_SIM_CHAT_ID = [-1001000000001]


def add_simulator_command(commands: Any) -> None:
    sim = commands.add_parser(
        "telegram-sim", help="run the Telegram Bot API simulator as an HTTP server"
    )
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument("--port", type=int, default=8081)
    sim.add_argument("--bots", type=int, default=6, help="how many bot tokens it accepts (6)")
    sim.add_argument(
        "--chat-id",
        type=int,
        action="append",
        default=None,
        help="a storage chat; repeat it for several (default -1001000000001)",
    )
    sim.add_argument("--tokens-file", default=None, help="also write the tokens to this file")
    sim.add_argument(
        "--concurrency-limit",
        type=int,
        default=1,
        help="calls at once per bot before a 429, small calls and the others counted apart (1)",
    )
    sim.add_argument(
        "--collision-retry-after", type=int, default=30, help="retry_after of a collision 429"
    )
    sim.add_argument("--sends-per-minute", type=int, default=None, help="per-bot budget")
    sim.add_argument("--latency", type=float, default=0.0, help="seconds added to every call")
    sim.add_argument(
        "--upload-bandwidth", type=float, default=None, help="bytes/s per upload connection"
    )
    sim.add_argument("--download-bandwidth", type=float, default=None, help="bytes/s per download")
    sim.add_argument(
        "--discard-file-bytes",
        action="store_true",
        help="keep no document's bytes (downloads answer 404): for benches that never read back",
    )
    sim.add_argument("--fault-5xx-rate", type=float, default=0.0)
    sim.add_argument("--fault-drop-rate", type=float, default=0.0)
    sim.add_argument("--fault-429-rate", type=float, default=0.0)
    sim.add_argument(
        "--fault-file-unavailable-rate",
        type=float,
        default=0.0,
        help="getFiles answered 'wrong file_id or the file is temporarily unavailable'",
    )
    sim.add_argument(
        "--getfile-bandwidth",
        type=float,
        default=None,
        help="bytes/s of the server's download before getFile answers",
    )
    sim.add_argument(
        "--local-dir",
        default=None,
        help="act as a --local Bot API server with this directory: getFile writes the file "
        "there and answers its absolute path; no /file/ route",
    )
    sim.add_argument("--seed", type=int, default=None)
    sim.add_argument("--tls-cert", default=None, help="serve HTTPS with this PEM certificate")
    sim.add_argument("--tls-key", default=None, help="... and this PEM private key (both or none)")
    sim.set_defaults(handler=cmd_telegram_sim)


def cmd_telegram_sim(args: argparse.Namespace) -> int:
    from app.telegram.simulator import main_simulator

    if bool(args.tls_cert) != bool(args.tls_key):
        # A certificate alone would fail deep in uvicorn; a key alone would
        # quietly serve plain HTTP.
        raise CliError("--tls-cert and --tls-key go together: give both to serve HTTPS")

    main_simulator(
        host=args.host,
        port=args.port,
        bots=args.bots,
        chat_id=args.chat_id or DEFAULT_SIM_CHAT_ID,
        tokens_file=args.tokens_file,
        max_concurrent_calls_per_bot=args.concurrency_limit,
        collision_retry_after=args.collision_retry_after,
        sends_per_minute=args.sends_per_minute,
        latency=args.latency,
        upload_bandwidth=args.upload_bandwidth,
        download_bandwidth=args.download_bandwidth,
        fault_5xx_rate=args.fault_5xx_rate,
        fault_drop_rate=args.fault_drop_rate,
        fault_429_rate=args.fault_429_rate,
        fault_file_unavailable_rate=args.fault_file_unavailable_rate,
        getfile_bandwidth=args.getfile_bandwidth,
        local_dir=str(Path(args.local_dir).resolve()) if args.local_dir else None,
        seed=args.seed,
        keep_file_bytes=not args.discard_file_bytes,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    return 0
