"""Checks of the paths and addresses a command is given, made before any work starts: each
failure is one ``ConfigError`` naming the argument (exit 2), never a traceback later."""

from __future__ import annotations

import os
from pathlib import Path

from daemonkit.settings import ConfigError, split_listen


def writable_dir(path: Path, name: str) -> Path:
    """``path`` as a folder this process can write in (created if missing)."""
    if path.exists() and not path.is_dir():
        raise ConfigError(f"{name}: {path} is not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"{name}: cannot create the folder {path}: {e.strerror or e}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(f"{name}: cannot write in {path}: permission denied")
    return path


def writable_file(path: Path, name: str) -> Path:
    """``path`` as a file this process can write (its folder exists; it is not a folder)."""
    if path.is_dir():
        raise ConfigError(f"{name}: {path} is a folder, not a file")
    parent = path.parent
    if not parent.is_dir():
        raise ConfigError(f"{name}: the folder {parent} does not exist")
    if path.exists() and not os.access(path, os.W_OK):
        raise ConfigError(f"{name}: cannot write {path}: permission denied")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{name}: cannot write in {parent}: permission denied")
    return path


def distinct_listen(a: str, a_name: str, b: str, b_name: str) -> None:
    """Two addresses one process listens on must not collide (same port, overlapping hosts)."""
    (ha, pa), (hb, pb) = split_listen(a), split_listen(b)
    wild = ("", "0.0.0.0", "::")
    if pa == pb and pa != 0 and (ha == hb or ha in wild or hb in wild):
        raise ConfigError(f"{b_name}: {b} is also {a_name} ({a}); give them different ports")
