"""`teleuploader serve` with a Tuning of the caller's own, for the tests and
benchmarks that run the service as a process and shorten its timers
(app/config/tuning.py: they are constructor parameters, not settings):

    python -m tests.serve_tuned '{"bot_lease_seconds": 4}'

Settings come from the environment, as for `teleuploader serve`.
"""

from __future__ import annotations

import json
import sys

from app.cli.main import leave, run_command, serve
from app.config.tuning import Tuning


def main() -> int:
    tuning = Tuning(**json.loads(sys.argv[1] if len(sys.argv) > 1 else "{}"))
    return run_command(lambda: serve(tuning))


if __name__ == "__main__":
    leave(main())
