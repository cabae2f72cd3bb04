"""Run Slurm's client commands: never through a shell, always with a timeout."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping


class SourceError(RuntimeError):
    """A command is missing, timed out or failed; the message says which and how."""


def run(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> str:
    try:
        res = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=dict(env or os.environ), errors="replace"
        )
    except FileNotFoundError as e:
        raise SourceError(f"{argv[0]}: not found") from e
    except subprocess.TimeoutExpired as e:
        raise SourceError(f"{argv[0]}: no answer within {timeout:.0f} s") from e
    except OSError as e:
        raise SourceError(f"{argv[0]}: {e.strerror}") from e
    if res.returncode != 0:
        raise SourceError(f"{argv[0]} exited {res.returncode}: {res.stderr.strip()[:300]}")
    return res.stdout
