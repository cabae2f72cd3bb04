"""Waiting for a condition with a generous deadline (never sleep-then-compare)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(pred: Callable[[], bool], timeout: float = 30.0, interval: float = 0.05) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if pred():
                return True
        except (OSError, ValueError):
            pass
        time.sleep(interval)
    return False
