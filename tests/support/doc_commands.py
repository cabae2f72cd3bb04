"""The commands README.md and docs/*.md show, as a reader would copy them.

A command is a line of a shell code block (``bash``, ``sh``, ``console``, ``shell``; in an
unnamed block, a line that starts with a program this project ships and is not its output),
with ``\\`` continuations joined, a leading ``$ `` and trailing comments dropped, or an inline
code span that starts with a program this project ships
(``gpuledger``, ``python -m gpuledger``/``exporter``/``analytics``/``bench...``, ``scripts/``,
``bench/``). Prefixes that do not change what runs (``sudo``, ``srun``, ``VAR=value``, a venv's
``bin/``) are taken off, so ``argv[0]`` names the program.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

SHELL_BLOCKS = {"bash", "sh", "console", "shell"}
OURS = re.compile(r"^(gpuledger|python3? -m (gpuledger|exporter|analytics|bench)|python3? bench/|scripts/|bench/)")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=")
_BIN = re.compile(r"^(\.venv|/opt/gpuledger)/bin/")
_OUTPUT = re.compile(r"^gpuledger( [a-z]+)?: ")  # what a gpuledger command prints, e.g. "gpuledger bench: ..."


@dataclass(frozen=True)
class DocCommand:
    where: str  # file:line
    text: str  # as written (continuations joined)
    argv: tuple[str, ...]  # program first, prefixes dropped
    inline: bool = False  # a code span in prose (may name a command without its arguments)

    @property
    def program(self) -> str:
        if self.argv[:2] in (("python", "-m"), ("python3", "-m")) and len(self.argv) > 2:
            return self.argv[2]
        if self.argv[0] in ("python", "python3") and len(self.argv) > 1:
            return self.argv[1]
        return self.argv[0]


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _argv(text: str) -> tuple[str, ...] | None:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    # a pipeline or a redirection: the first command is the one shown
    for i, w in enumerate(words):
        if w in ("|", "||", "&&", ";", ">", ">>", "2>&1") or w.startswith(">"):
            words = words[:i]
            break
    while words and (words[0] in ("sudo", "srun", "exec", "env") or _ENV.match(words[0])):
        words = words[1:]
    if words:
        words[0] = _BIN.sub("", words[0])
    return tuple(words) or None


def _block_commands(path: Path) -> list[DocCommand]:
    out: list[DocCommand] = []
    lang: str | None = None
    pending = ""
    start = 0
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            lang = None if lang is not None else line[3:].strip()
            continue
        if lang not in SHELL_BLOCKS and lang != "":
            continue
        text = line.strip()
        if text.startswith("$ "):
            text = text[2:]
        if not pending and (not text or text.startswith("#")):
            continue
        if lang == "" and not pending and (not OURS.match(text) or _OUTPUT.match(text)):
            continue  # an unnamed block: only the lines that run what this project ships, not its output
        if not pending:
            start = n
        if text.endswith("\\"):
            pending += text[:-1] + " "
            continue
        full, pending = pending + text, ""
        argv = _argv(full)
        if argv:
            out.append(DocCommand(f"{path.name}:{start}", full, argv))
    return out


def _inline_commands(path: Path) -> list[DocCommand]:
    out: list[DocCommand] = []
    lang: str | None = None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("```"):
            lang = None if lang is not None else line[3:].strip()
            continue
        if lang is not None:
            continue
        for m in re.finditer(r"`([^`]+)`", line):
            span = m.group(1).strip()
            if not OURS.match(span) or re.match(r"^gpuledger[-:_.]", span):
                continue
            argv = _argv(span.replace("…", "").replace("[", "").replace("]", ""))
            if argv:
                out.append(DocCommand(f"{path.name}:{n}", span, argv, inline=True))
    return out


def doc_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in doc_files():
        found += _block_commands(path) + _inline_commands(path)
    return found
