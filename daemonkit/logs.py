"""Logging for a daemon: one format on stderr, and the libraries' per-request chatter kept at
debug level."""

from __future__ import annotations

import logging

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
NOISY = ("httpx", "httpcore", "apscheduler")  # one line per HTTP request and per scheduled run


def setup_logging(level: str) -> None:
    """Log at ``level`` (debug, info, warning, error); below debug, the noisy libraries warn only."""
    logging.basicConfig(level=getattr(logging, level.upper()), format=FORMAT)
    if level.lower() != "debug":
        for name in NOISY:
            logging.getLogger(name).setLevel(logging.WARNING)
