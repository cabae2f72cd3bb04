"""Layered settings: defaults < config file < environment < flags, a later layer winning.

The file is TOML, or YAML by its ``.yaml``/``.yml`` suffix, read by pydantic-settings' own
``TomlConfigSettingsSource`` and ``YamlConfigSettingsSource`` through a bounded reader
(:mod:`daemonkit.config_file`: size, encoding, aliases); environment variables are the class's
``env_prefix`` plus ``SECTION__KEY`` (``GPULEDGER_WEB__LISTEN=:10044``), and one of that shape
naming no section is refused like an unknown key; flags arrive as nested dicts. Anything invalid
raises :class:`ConfigError`, one line per field at fault (at most 20), naming it and where it can
be set, with anything echoed from the input cut to 200 characters; commands print it and exit 2.
"""

from __future__ import annotations

import difflib
import os
import re
import reprlib
import types
import typing
import zoneinfo
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from daemonkit.config_file import ConfigFileError, check_readable, is_yaml, read_config_file

MAX_SHOWN = 200
"""Characters of any input echoed into an error message."""
MAX_ERRORS = 20
"""Fields listed in one error; the rest are counted."""


class ConfigError(Exception):
    """Invalid configuration; the message names the field (or file, or variable) at fault."""


class _TomlFile(TomlConfigSettingsSource):
    """The library's TOML source, reading through the bounded reader."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        return read_config_file(Path(str(file_path)))


class _YamlFile(YamlConfigSettingsSource):
    """The library's YAML source, reading through the bounded reader (aliases counted)."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        return read_config_file(Path(str(file_path)))


class LayeredSettings(BaseSettings):
    """Settings read from every layer. A subclass sets ``env_prefix`` and its sections; the
    file comes from ``toml_file`` or ``yaml_file`` in its config, which :func:`load_settings`
    sets for one load."""

    model_config = SettingsConfigDict(
        env_nested_delimiter="__", extra="forbid", validate_default=True, allow_inf_nan=False
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _TomlFile(settings_cls), _YamlFile(settings_cls))


S = TypeVar("S", bound=LayeredSettings)


def load_settings(cls: type[S], config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> S:
    """Build ``cls`` from every layer; ``overrides`` are the flags' values as nested dicts. Without
    ``config_file``, ``{env_prefix}CONFIG`` names the file."""
    prefix = cls.model_config.get("env_prefix", "")
    config_file = config_file or os.environ.get(f"{prefix}CONFIG") or None
    check_environment(cls, prefix)
    try:
        bound = cls if config_file is None else _reading(cls, Path(config_file).expanduser())
        loaded = bound(**(overrides or {}))
    except ConfigFileError as e:
        raise ConfigError(str(e)) from None
    except ValidationError as e:
        raise ConfigError(describe(e, prefix, config_file, cls)) from None
    except SettingsError as e:
        field = re.search(r'field "([^"]+)"', str(e))
        name = f"{prefix}{field[1].upper()}: " if field else ""
        raise ConfigError(f"{clip(name, 80)}invalid configuration in the environment: {clip(str(e))}") from None
    if bound is cls:
        return loaded
    return cast(S, cls.model_construct(loaded.model_fields_set, **dict(loaded)))  # a plain cls, not the subclass


def _reading(cls: type[S], path: Path) -> type[S]:
    """``cls`` reading ``path``: the library's sources take the file from the class's config."""
    check_readable(path)  # the sources skip a file that is not there, or not a file; a named file must be
    config = SettingsConfigDict(yaml_file=path) if is_yaml(path) else SettingsConfigDict(toml_file=path)
    return cast(type[S], type(cls.__name__, (cls,), {"__module__": cls.__module__, "model_config": config}))


def check_environment(cls: type[BaseModel], env_prefix: str) -> None:
    """Refuse ``{env_prefix}SECTION__KEY`` where SECTION is no section of ``cls``: the library
    ignores it, while an unknown KEY of a known section is an error. Other variables with the
    prefix (``GPULEDGER_CONFIG``, a test's ``GPULEDGER_TEST_NOW``) are not settings."""
    if not env_prefix:
        return
    shape = re.compile(re.escape(env_prefix) + r"(?P<section>[A-Za-z0-9_]+?)__", re.IGNORECASE)
    for name in sorted(os.environ):
        m = shape.match(name)
        if m is None or m["section"].lower() in cls.model_fields:
            continue
        sections = [n for n, f in cls.model_fields.items() if _model_of(f.annotation) is not None]
        raise ConfigError(
            f"{clip(name, 80)}: unknown section {clip(m['section'].lower(), 80)!r} in the environment"
            f"{_did_you_mean(m['section'].lower(), sections)} (settings are {env_prefix}SECTION__KEY)"
        )


def describe(
    e: ValidationError,
    env_prefix: str,
    config_file: str | Path | None = None,
    model: type[BaseModel] | None = None,
) -> str:
    """A validation error as one line per field: where it is, what is wrong, where to set it."""
    errors = e.errors()
    lines = ["invalid configuration:"]
    for err in errors[:MAX_ERRORS]:
        parts = err["loc"]
        loc = ".".join(clip(str(p), 80) for p in parts) or "(top level)"
        env = env_prefix + "__".join(str(p) for p in parts[:2]).upper()
        from_env = env in _upper_environ()
        if err["type"] == "extra_forbidden":
            known = _fields_at(model, parts[:-1]) if model is not None else []
            hint = _did_you_mean(str(parts[-1]), known)
            where = f" (from {clip(env, 80)})" if from_env else f" in {config_file}" if config_file else ""
            lines.append(f"  {loc}: unknown setting{where}{hint} (see docs/configuration.md for the names)")
            continue
        msg = clip(err["msg"].removeprefix("Value error, "), 2 * MAX_SHOWN)
        got = err.get("input")
        shown = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {shown_value(got)})"
        where = f"; set in {config_file}, {env} or a flag" if config_file else f"; set by {env} or a flag"
        lines.append(f"  {loc}: {msg}{shown}{where}")
    if len(errors) > MAX_ERRORS:
        lines.append(f"  ... and {len(errors) - MAX_ERRORS} more")
    return "\n".join(lines)


_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxstring, _repr.maxother = 3, MAX_SHOWN, MAX_SHOWN
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 6


def shown_value(v: Any) -> str:
    """``repr(v)`` bounded in time and in length, whatever ``v`` holds (nested, shared, huge)."""
    return clip(_repr.repr(v))


def clip(s: str, limit: int = MAX_SHOWN) -> str:
    """``s`` cut to ``limit`` characters, control characters escaped: safe to print."""
    head = s[:limit]
    if not head.isprintable():
        head = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in head)
    return head if len(s) <= limit else f"{head}… ({len(s):,} characters)"


def _did_you_mean(name: str, known: list[str]) -> str:
    close = difflib.get_close_matches(name[:MAX_SHOWN], known, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def _fields_at(model: type[BaseModel] | None, path: tuple[int | str, ...]) -> list[str]:
    """The field names of the model found at ``path`` under ``model`` (list indexes skipped)."""
    for part in path:
        if model is None:
            return []
        if isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        model = _model_of(field.annotation) if field is not None else None
    return list(model.model_fields) if model is not None else []


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The model an annotation holds (``X``, ``X | None``, ``list[X]``), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, tuple):
        for arg in typing.get_args(annotation):
            found = _model_of(arg)
            if found is not None:
                return found
    return None


def _upper_environ() -> set[str]:
    return {k.upper() for k in os.environ}


def check_timezone(v: str) -> str:
    """A settings validator: an IANA time zone name, or a ValueError naming it (cut short: the
    name may be anything a file held). The tz database's longest name is 32 characters; a long
    one would reach the file system as a path (ENAMETOOLONG from the tzdata package)."""
    try:
        if len(v) > 255:
            raise ValueError
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise ValueError(f"unknown time zone {clip(v)!r}") from None
    return v


def split_listen(v: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' or '[v6]:PORT' -> (host, port); ValueError otherwise."""
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{v!r} is not HOST:PORT with a port in 0-65535")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{v!r}: put an IPv6 address in brackets, e.g. [::1]:{port}")
    return host, int(port)
