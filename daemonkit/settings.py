"""Layered settings: defaults < config file < environment < flags, a later layer winning.

The file is TOML, or YAML by its ``.yaml``/``.yml`` suffix, read by pydantic-settings' own
``TomlConfigSettingsSource`` and ``YamlConfigSettingsSource``; environment variables are the
class's ``env_prefix`` plus ``SECTION__KEY`` (``GPULEDGER_WEB__LISTEN=:10044``); flags arrive as
nested dicts. Anything invalid raises :class:`ConfigError`, one line per field at fault, naming
it and where it can be set; commands print it and exit 2.
"""

from __future__ import annotations

import os
import tomllib
import zoneinfo
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)


class ConfigError(Exception):
    """Invalid configuration; the message names the field (or file) at fault."""


class _YamlFile(YamlConfigSettingsSource):
    """The library's YAML source, refusing a document that is not a mapping of sections."""

    def _read_file(self, file_path: Path | Traversable) -> dict[str, Any]:
        data = super()._read_file(file_path)
        if not isinstance(data, dict):
            raise ConfigError(f"config file {file_path}: the top level must be a table of sections")
        return data


class LayeredSettings(BaseSettings):
    """Settings read from every layer. A subclass sets ``env_prefix`` and its sections; the
    file comes from ``toml_file`` or ``yaml_file`` in its config, which :func:`load_settings`
    sets for one load."""

    model_config = SettingsConfigDict(env_nested_delimiter="__", extra="forbid", validate_default=True)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls), _YamlFile(settings_cls))


S = TypeVar("S", bound=LayeredSettings)


def load_settings(cls: type[S], config_file: str | Path | None = None, overrides: dict[str, Any] | None = None) -> S:
    """Build ``cls`` from every layer; ``overrides`` are the flags' values as nested dicts. Without
    ``config_file``, ``{env_prefix}CONFIG`` names the file."""
    prefix = cls.model_config.get("env_prefix", "")
    config_file = config_file or os.environ.get(f"{prefix}CONFIG") or None
    bound = cls if config_file is None else _reading(cls, Path(config_file))
    try:
        loaded = bound(**(overrides or {}))
    except ValidationError as e:
        raise ConfigError(describe(e, prefix, config_file)) from None
    except SettingsError as e:
        raise ConfigError(f"invalid configuration in the environment: {e}") from None
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"config file {config_file}: {e}") from None
    if bound is cls:
        return loaded
    return cast(S, cls.model_construct(loaded.model_fields_set, **dict(loaded)))  # a plain cls, not the subclass


def _reading(cls: type[S], path: Path) -> type[S]:
    """``cls`` reading ``path``: the library's sources take the file from the class's config."""
    try:
        with path.open("rb"):
            pass  # the sources skip a file that is not there; a named file must be
    except OSError as e:
        raise ConfigError(f"config file {path}: {e.strerror}") from None
    is_yaml = path.suffix.lower() in (".yaml", ".yml")
    config = SettingsConfigDict(yaml_file=path) if is_yaml else SettingsConfigDict(toml_file=path)
    return cast(type[S], type(cls.__name__, (cls,), {"__module__": cls.__module__, "model_config": config}))


def describe(e: ValidationError, env_prefix: str, config_file: str | Path | None = None) -> str:
    """A validation error as one line per field: where it is, what is wrong, where to set it."""
    lines = ["invalid configuration:"]
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        env = env_prefix + "__".join(str(p) for p in err["loc"][:2]).upper()
        if err["type"] == "extra_forbidden":
            where = f" in {config_file}" if config_file else ""
            lines.append(f"  {loc}: unknown setting{where} (see docs/configuration.md for the names)")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        got = err.get("input")
        shown = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        where = f"; set in {config_file}, {env} or a flag" if config_file else f"; set by {env} or a flag"
        lines.append(f"  {loc}: {msg}{shown}{where}")
    return "\n".join(lines)


def check_timezone(v: str) -> str:
    """A settings validator: an IANA time zone name, or a ValueError naming it."""
    try:
        zoneinfo.ZoneInfo(v)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {v!r}") from None
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
