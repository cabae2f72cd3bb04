"""The argument parser every ``gpuledger`` command uses: a mistake on the command line is one
line naming the argument, with what was probably meant (``--port 9000``: ``--listen :9000``; a
misspelt option: the closest one), exit 2; and a ``--help`` that starts with one line of what the
command does and ends with an example (``describe``)."""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn, TypeVar, overload

_N = TypeVar("_N")

# the last word of an option that names where to listen: --port, --analytics-port, --bind ...
LISTEN_WORDS = frozenset({"port", "bind", "address", "addr", "host"})


def describe(p: argparse.ArgumentParser, description: str, *examples: str) -> None:
    """Give ``p`` a one-line description and an ``Example:`` epilog, laid out as written."""
    p.description = description
    p.epilog = ("Example:\n" if len(examples) == 1 else "Examples:\n") + "\n".join(f"  {e}" for e in examples)
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def options(p: argparse.ArgumentParser) -> list[str]:
    """The option strings ``p`` takes (``--listen``, ``-h`` ...)."""
    return [s for a in p._actions for s in a.option_strings]


def suggestion(known: Sequence[str], option: str, value: str | None) -> str | None:
    """What ``option`` (given ``value``) probably meant among the ``known`` options, or None."""
    name = option.split("=", 1)[0]
    *head, last = name.lstrip("-").split("-")
    if last in LISTEN_WORDS:
        for listen in (f"--{'-'.join([*head, 'listen'])}", "--listen"):
            if listen in known:
                if value is None:
                    return f"{listen} HOST:PORT"
                if value.isdigit():
                    return f"{listen} :{value}"
                return f"{listen} {value}" if ":" in value else f"{listen} {value}:PORT"
        return None  # a command that does not listen: no near spelling of --port stands in for it
    close = difflib.get_close_matches(name, [k for k in known if k.startswith("--")], n=1, cutoff=0.6)
    return close[0] if close else None


def unknown_message(p: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    """One line for the arguments ``p`` did not take: each unknown option (with its value, if it
    looks like it had one) and a suggestion where one fits; stray words after them."""
    known, parts, i = options(p), [], 0
    while i < len(extras):
        word = extras[i]
        if word.startswith("-") and word != "-":
            value: str | None = word.split("=", 1)[1] if "=" in word else None
            if value is None and i + 1 < len(extras) and not extras[i + 1].startswith("-"):
                value, i = extras[i + 1], i + 1
            hint = suggestion(known, word, value)
            parts.append(f"unknown option {word.split('=', 1)[0]}" + (f" (did you mean {hint}?)" if hint else ""))
        else:
            parts.append(f"unexpected argument {word!r}")
        i += 1
    return "; ".join(parts)


def _owner(p: argparse.ArgumentParser, ns: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)command parser that ran last: the one whose options the user meant."""
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            name = getattr(ns, a.dest, None) if a.dest != argparse.SUPPRESS else None
            if isinstance(name, str) and name in a.choices:
                return _owner(a.choices[name], ns)
    return p


class HintingParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` (subcommands made with ``add_subparsers`` are ones too) whose errors
    are one line: ``PROG: error: MESSAGE; see PROG --help``, exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")

    @overload
    def parse_args(self, args: Iterable[str] | None = None, namespace: None = None) -> argparse.Namespace: ...
    @overload
    def parse_args(self, args: Iterable[str] | None, namespace: _N) -> _N: ...
    @overload
    def parse_args(self, *, namespace: _N) -> _N: ...
    def parse_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            owner = _owner(self, ns)
            owner.error(unknown_message(owner, extras))
        return ns
