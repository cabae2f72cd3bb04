"""Attacks on configuration: hostile and broken files and environment variables, each given to the
real command line in a child process (``gpuledger exporter --check-config``, which validates every
section and exits, and ``gpuledger report`` on an absent history, which validates and then fails to
read). Safe means exit 2 with one message naming the file, field or variable, no traceback, in
seconds; each child is killed after CHILD_TIMEOUT.

    python -m bench.attacks.config
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.attacks import Row  # noqa: E402

CHILD_TIMEOUT = 15.0


@dataclass(frozen=True)
class Case:
    attack: str
    name: str  # file name ("" for none)
    content: bytes
    named: str  # what the first line of the error must contain
    env: tuple[tuple[str, str], ...] = ()


def _laughs(levels: int) -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
    return ("\n".join(lines) + f"\nexporter:\n  hostname: *a{levels}\n").encode()


CASES = [
    Case(f"YAML billion laughs (9^9 values, {len(_laughs(8))} bytes)", "laughs.yaml", _laughs(8), "aliases"),
    Case("YAML recursive alias", "rec.yaml", b"a: &a [1, *a]\n", "rec.yaml"),
    Case("config file of 2 MiB", "big.toml", b"# pad\n" * 350_000, "larger than 1 MiB"),
    Case("Latin-1 config", "latin1.toml", b'[exporter]\nhostname = "n\xf6de"\n', "latin1.toml:2: not UTF-8"),
    Case("UTF-16 config", "utf16.toml", '[exporter]\nhostname = "x"\n'.encode("utf-16"), "UTF-16"),
    Case("TOML syntax error", "bad.toml", b"[exporter]\nreader = = 1\n", "bad.toml:2:"),
    Case("TOML nested 100,000 deep", "deep.toml", b"a = " + b"[" * 100_000, "nested too deeply"),
    Case("YAML syntax error", "bad.yaml", b"exporter: [unclosed\n", "bad.yaml:2:"),
    Case("YAML python tag", "tag.yaml", b'exporter: !!python/object/apply:os.system ["id"]\n', "tag.yaml:1:"),
    Case("YAML top level a list", "list.yaml", b"- exporter\n", "not a list"),
    Case("YAML top level a scalar", "scalar.yaml", b"42\n", "not a number"),
    Case("a directory as --config", ".", b"", "Is a directory"),
    Case("a missing --config", "absent.toml", b"", "No such file"),
    Case("a FIFO as --config", "fifo.toml", b"", "not a regular file"),
    Case("typo in [cost] (unused by the exporter)", "cost.toml", b'[cost]\ncurrencyy = "EUR"\n', "invalid config"),
    Case("unknown time zone in [analytics]", "tz.toml", b'[analytics]\ntimezone = "Europe/Berln"\n', "invalid"),
    Case("hostname of 900 kB", "host.toml", b'[exporter]\nhostname = "' + b"x" * 900_000 + b'"\n', "invalid"),
    Case("hostname with ESC", "esc.toml", b'[exporter]\nhostname = "a\\u001b[2Jb"\n', "invalid"),
    Case("unknown env section", "", b"", "GPULEDGER_BOGUS__X", (("GPULEDGER_BOGUS__X", "1"),)),
    Case("unknown env key", "", b"", "invalid", (("GPULEDGER_EXPORTER__READERR", "nvml"),)),
    Case("hostname of 100 kB in env", "", b"", "invalid", (("GPULEDGER_EXPORTER__HOSTNAME", "h" * 100_000),)),
]

COMMANDS = {
    "exporter": ["exporter", "--check-config"],
    "report": ["report", "--history", "/nonexistent/history.db"],
}


def _attempt(command: list[str], case: Case, folder: Path) -> Row:
    args = [sys.executable, "-m", "gpuledger", *command]
    if case.name:
        path = folder / case.name
        if case.name == "fifo.toml" and not path.exists():
            os.mkfifo(path)
        elif case.content and not path.exists():
            path.write_bytes(case.content)
        args += ["--config", str(path)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPULEDGER_")}
    env.update(case.env)
    t0 = time.monotonic()
    try:
        res = subprocess.run(args, capture_output=True, text=True, env=env, cwd=ROOT, timeout=CHILD_TIMEOUT)
        rc: int | str = res.returncode
        err = res.stderr
    except subprocess.TimeoutExpired:
        rc, err = "hung", ""
    seconds = time.monotonic() - t0
    head = " ".join(err.splitlines()[:2]).replace(f"{folder}/", "").replace(str(folder), ".")  # a field is on line 2
    ok = rc == 2 and "Traceback" not in err and case.named in head and len(err) < 20_000
    first = " ".join(head.split())[:120]
    return Row(
        "config",
        f"{command[0]}: {case.attack}",
        "exit 2, one line naming it",
        f"exit {rc} in {seconds:.1f} s, {len(err):,} B: {first}",
        ok,
    )


def run() -> list[Row]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpuledger-config-attack-") as d:
        for case in CASES:
            for command in COMMANDS.values():
                rows.append(_attempt(command, case, Path(d)))
    return rows


if __name__ == "__main__":
    for r in run():
        print(f"{'ok' if r.ok else 'NO'}  {r.attack}: {r.observed}")
