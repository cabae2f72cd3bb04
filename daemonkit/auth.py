"""Basic auth with bcrypt-hashed passwords (the exporter-toolkit convention): the check of a
configured hash at start, and the per-request check, bounded in time and in cores."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Mapping

import bcrypt

MAX_BCRYPT_COST = 14
"""Cost 14 takes about a second per check on a current core; 31 would take days."""
_BCRYPT = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")
# The digest of a password no one has: checked for unknown users, so a miss costs what a hit does.
_DUMMY_DIGEST = "N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy"


def check_password_hash(hashed: str) -> str:
    """A configured password hash, or a ValueError saying what is wrong with it: not bcrypt, a
    cost outside 4-14, a salt or digest bcrypt refuses, or the hash of the empty password."""
    m = _BCRYPT.match(hashed)
    if m is None:
        raise ValueError("must be a bcrypt hash ($2b$...), not plain text")
    cost = int(m.group(1))
    if not 4 <= cost <= MAX_BCRYPT_COST:
        raise ValueError(
            f"bcrypt cost {cost} is outside 4-{MAX_BCRYPT_COST} (each check costs 2^cost rounds); "
            "hash again, e.g. htpasswd -nbBC 10 USER PASSWORD"
        )
    try:
        empty = bcrypt.checkpw(b"", hashed.encode())
    except ValueError as e:
        raise ValueError(f"is not a valid bcrypt hash ({e})") from None
    if empty:
        raise ValueError("is the hash of the empty password")
    return hashed


class BasicAuth:
    """Checks Basic credentials against bcrypt hashes; remembers credentials that passed so a
    15-second scrape does not pay bcrypt's deliberate ~100 ms every time.

    An unknown user is checked against a hash of the highest configured cost, so the answer takes
    as long whether or not the user exists; a password over bcrypt's 72 bytes is refused (after
    the same work). At most a few checks run at once, so a flood of wrong passwords queues
    instead of taking every core."""

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = {u: h.encode() for u, h in users.items()}
        costs = [int(m.group(1)) for h in users.values() if (m := _BCRYPT.match(h))]
        self._dummy = f"$2b${max(costs, default=4):02d}${_DUMMY_DIGEST}".encode()
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(max(1, (os.cpu_count() or 2) // 2))

    @property
    def enabled(self) -> bool:
        return bool(self._users)

    def check(self, header: str | None) -> bool:
        """Whether the request may pass: always without users, else its credentials check."""
        return not self._users or self.user(header) is not None

    def user(self, header: str | None) -> str | None:
        """The user whose credentials ``header`` carries and check, else None (always None
        without configured users)."""
        if not self._users:
            return None
        if not header or not header.startswith("Basic ") or len(header) > 1024:
            return None
        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        secret = password.encode()
        hashed = self._users.get(user)
        key = hashlib.sha256(user.encode() + b"\0" + secret + b"\0" + (hashed or b"")).digest()
        with self._lock:
            if hashed is not None and key in self._ok:
                return user
        fits = len(secret) <= 72 and b"\0" not in secret
        with self._slots:
            try:
                ok = bcrypt.checkpw(secret if fits else b"", hashed or self._dummy)
            except ValueError:
                ok = False
        if not (ok and fits and hashed is not None):
            return None
        with self._lock:
            if len(self._ok) > 1024:
                self._ok.clear()
            self._ok.add(key)
        return user
