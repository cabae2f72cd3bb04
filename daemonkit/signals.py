"""Wait for the end of a daemon's life: SIGTERM or SIGINT (Ctrl-C), or a given time."""

from __future__ import annotations

import logging
import signal
import threading
from types import FrameType

log = logging.getLogger(__name__)


def wait_for_signal(seconds: float | None = None) -> None:
    """Block until SIGTERM or SIGINT arrives (or ``seconds`` pass). Call from the main thread."""
    done = threading.Event()

    def _stop(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping", signum)
        done.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    done.wait(seconds)
