"""Typed JSON documents (benchmark plans and results, weekly reports): dataclasses read and
written through pydantic ``TypeAdapter``s. Reading is strict: a string where a number belongs, a
fraction where a count belongs or an unknown key is an error that names the field, never a value."""

from __future__ import annotations

from typing import TypeVar

from pydantic import ConfigDict, TypeAdapter, ValidationError

STRICT = ConfigDict(strict=True, extra="forbid")
"""The config of a document's outermost dataclass (``__pydantic_config__ = STRICT``); dataclasses
nested in it without a config of their own are read under it too."""

T = TypeVar("T")
_SHOWN = 5  # errors listed in one message; the rest are counted


class DocumentError(ValueError):
    """A document that does not match its type; the message names each field at fault."""


def parse(adapter: TypeAdapter[T], text: str | bytes, what: str) -> T:
    """``text`` as the adapter's type, or a :class:`DocumentError` starting with ``what``."""
    try:
        return adapter.validate_json(text)
    except ValidationError as e:
        raise DocumentError(f"{what}: {describe(e)}") from None


def describe(e: ValidationError) -> str:
    """'rows.0.busbw: Input should be a valid number (got 'fast'); ...', on one line."""
    errors = e.errors(include_url=False)
    parts = []
    for err in errors[:_SHOWN]:
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        got = err.get("input")
        quiet = isinstance(got, dict | list) or err["type"] in ("missing", "json_invalid")
        shown = "" if quiet else f" (got {got!r:.60})"
        parts.append(f"{loc}: {err['msg']}{shown}")
    if len(errors) > _SHOWN:
        parts.append(f"and {len(errors) - _SHOWN} more")
    return "; ".join(parts)
