"""Reading a config file, bounded: a regular file of at most 1 MiB, UTF-8, TOML or YAML by its
suffix, a table of sections at the top, at most 100,000 values with YAML aliases expanded.

YAML anchors and aliases (and ``<<`` merge keys) stay allowed, since the project's own
compose file uses them, but the values they expand to are counted on the parsed node graph,
each distinct node once, before anything is built: a "billion laughs" file of a few hundred
bytes is refused in milliseconds instead of expanding to gigabytes. A recursive alias is refused.
Every failure is a :class:`ConfigFileError` of one line naming the file (and the line where
the parser knows it).
"""

from __future__ import annotations

import re
import stat
import tomllib
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 1 << 20
"""A configuration is a few kB; the largest example in the repository is under 2 kB."""
MAX_VALUES = 100_000
"""Values (scalars, lists, tables) in a file, aliases expanded; a real file has hundreds."""

_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_TOML_AT = re.compile(r"^(?P<msg>.*) \(at (?:line (?P<line>\d+), column \d+|end of document)\)$")


class ConfigFileError(Exception):
    """The file cannot be read as a configuration; the message names it."""


def is_yaml(path: Path) -> bool:
    return path.suffix.lower() in (".yaml", ".yml")


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's sections, or a ConfigFileError naming the file and what is wrong."""
    text = _read_text(path)
    data = _parse_yaml(path, text) if is_yaml(path) else _parse_toml(path, text)
    if not isinstance(data, dict):
        raise ConfigFileError(f"config file {path}: the top level must be a table of sections, not a {_kind(data)}")
    return data


def check_readable(path: Path) -> None:
    """Fail early, naming the file, when it is absent, not a regular file or unreadable."""
    _read_text(path)


def _read_text(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        if stat.S_ISDIR(mode):
            raise ConfigFileError(f"config file {path}: Is a directory")
        if not stat.S_ISREG(mode):  # a FIFO would block the start, a device never end
            raise ConfigFileError(f"config file {path}: not a regular file")
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigFileError(f"config file {path}: {e.strerror or e}") from None
    if len(data) > MAX_BYTES:
        raise ConfigFileError(f"config file {path}: larger than {MAX_BYTES // (1 << 20)} MiB; not a configuration")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        if data.startswith((b"\xff\xfe", b"\xfe\xff")):
            raise ConfigFileError(f"config file {path}: UTF-16 text; save it as UTF-8") from None
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigFileError(
            f"config file {path}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})"
        ) from None


def _parse_toml(path: Path, text: str) -> Any:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = _TOML_AT.match(str(e))
        msg = m["msg"] if m else str(e)
        where = f"{path}:{m['line']}" if m and m["line"] else str(path)
        if m and not m["line"]:
            msg += " at the end of the file"
        raise ConfigFileError(f"config file {where}: {msg[:200]}") from None
    except RecursionError:
        raise ConfigFileError(f"config file {path}: nested too deeply") from None
    if _count(data) > MAX_VALUES:
        raise ConfigFileError(f"config file {path}: more than {MAX_VALUES:,} values; not a configuration")
    return data


class _BoundedLoader(_Loader):  # type: ignore[misc,valid-type]
    """The safe loader, refusing a document whose aliases expand beyond MAX_VALUES values."""

    def get_single_node(self) -> yaml.Node | None:
        node: yaml.Node | None = super().get_single_node()
        if node is not None and _expanded(node, {}, set()) > MAX_VALUES:
            raise _TooLarge
        return node


class _TooLarge(Exception):
    pass


class _Recursive(Exception):
    pass


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_BoundedLoader) or {}  # a safe loader: no Python objects
    except _TooLarge:
        raise ConfigFileError(
            f"config file {path}: more than {MAX_VALUES:,} values once its aliases are expanded; not a configuration"
        ) from None
    except _Recursive:
        raise ConfigFileError(f"config file {path}: an alias refers to the node that contains it") from None
    except RecursionError:
        raise ConfigFileError(f"config file {path}: nested too deeply") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        what = ", ".join(str(p) for p in (e.context, e.problem) if p)
        raise ConfigFileError(f"config file {where}: {_one_line(what)}") from None
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        raise ConfigFileError(
            f"config file {path}:{line}: character #x{e.character:04x} is not allowed in YAML ({e.reason})"
        ) from None
    except yaml.YAMLError as e:
        raise ConfigFileError(f"config file {path}: {_one_line(str(e))}") from None


def _expanded(node: yaml.Node, sizes: dict[int, int], open_: set[int]) -> int:
    """How many values ``node`` stands for with every alias expanded; each distinct node is
    measured once, so this is linear in the file even when the expansion is exponential."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise _Recursive
    size = 1
    if isinstance(node, yaml.SequenceNode | yaml.MappingNode):
        open_.add(key)
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for kv in node.value for n in kv]
        for child in children:
            size += _expanded(child, sizes, open_)
            if size > MAX_VALUES:
                raise _TooLarge
        open_.discard(key)
    sizes[key] = size
    return size


def _count(data: Any) -> int:
    n, todo = 0, [data]
    while todo and n <= MAX_VALUES:
        item = todo.pop()
        n += 1
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
    return n


def _kind(data: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(data), "scalar")


def _one_line(s: str) -> str:
    s = " ".join(s.split())
    return s if len(s) <= 200 else s[:200] + "…"
