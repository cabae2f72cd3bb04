"""Every command's ``--help`` starts with one line saying what it does and gives an example that
parses. The subcommands are read from the parser itself, so a new one without help fails here."""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import subprocess
import sys

import pytest

from daemonkit.argparse_hints import HintingParser, describe
from gpuledger.cli import build_parser
from tests.support.paths import REPO


def subcommands(p: argparse.ArgumentParser) -> list[str]:
    return [name for a in p._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]


def problems(text: str, prog: str) -> list[str]:
    """What a ``--help`` text lacks: a one-line description ending in a period right after the
    usage, and an example line starting with ``prog`` in an ``Example(s):`` section."""
    blocks = text.split("\n\n")
    found = []
    if not blocks[0].startswith("usage:"):
        found.append("does not start with usage")
    description = blocks[1].splitlines() if len(blocks) > 1 else []
    if len(description) != 1 or description[0].startswith(" ") or not description[0].endswith("."):
        found.append(f"the first block after usage is not a one-line sentence: {description}")
    examples = [b for b in blocks if b.startswith(("Example:\n", "Examples:\n"))]
    lines = [line.strip() for b in examples for line in b.splitlines()[1:]]
    if not lines or not all(line.startswith(f"{prog} ") for line in lines):
        found.append(f"no example, or one not starting with {prog!r}: {lines}")
    return found


def examples(text: str) -> list[str]:
    blocks = [b for b in text.split("\n\n") if b.startswith(("Example:\n", "Examples:\n"))]
    return [line.strip() for b in blocks for line in b.splitlines()[1:]]


def help_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([*argv, "--help"])
    assert e.value.code == 0
    return capsys.readouterr().out


COMMANDS = subcommands(build_parser())


def test_the_subcommands_are_found() -> None:
    assert {"exporter", "analytics", "report", "job", "statement", "bench", "up", "demo", "version"} <= set(COMMANDS)


@pytest.mark.parametrize("command", ["", *COMMANDS])
def test_help_starts_with_a_description_and_gives_an_example_that_parses(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    argv = [command] if command else []
    text = help_of(argv, capsys)
    assert problems(text, "gpuledger") == [], text
    for example in examples(text):
        words = shlex.split(example)[1:]
        if "--help" in words or "COMMAND" in words:
            continue
        args = build_parser().parse_args(words)  # an example that no longer parses exits 2 here
        assert args.command == (command or args.command), example


def test_a_subcommand_without_a_description_or_example_is_caught() -> None:
    p = HintingParser(prog="gpuledger")
    sub = p.add_subparsers(dest="command")
    bare = sub.add_parser("bare", help="no description")
    assert len(problems(bare.format_help(), "gpuledger")) == 2
    two_lines = sub.add_parser("two")
    describe(two_lines, "First line.\nSecond line.", "other two")
    assert len(problems(two_lines.format_help(), "gpuledger")) == 2  # two lines; example of another prog
    good = sub.add_parser("good")
    describe(good, "Does one thing.", "gpuledger good")
    assert problems(good.format_help(), "gpuledger") == []


MODULES = [m for m in ("exporter", "analytics") if importlib.util.find_spec(f"{m}.__main__") is not None]


@pytest.mark.integration
@pytest.mark.parametrize("module", MODULES)
def test_python_m_entry_points_have_the_same_help(module: str) -> None:
    res = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert problems(res.stdout, f"python -m {module}") == [], res.stdout
