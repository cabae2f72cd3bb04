"""Malformed replay captures, built from the bundled one: each with the line a loader must name
and a phrase its message must hold. Used by tests/product/test_hostile_inputs.py and bench/attacks/inputs.py."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.support.paths import CAPTURE

_LINES = CAPTURE.read_text().splitlines()
HEADER = json.loads(_LINES[0])
RECORDS: list[dict[str, Any]] = [json.loads(x) for x in _LINES[1:]]


@dataclass(frozen=True)
class BadCapture:
    name: str
    content: bytes
    line: int | None  # the line the message names (None: the file as a whole)
    phrase: str  # in the message


def _dump(header: object, records: list[Any]) -> bytes:
    return ("\n".join(json.dumps(x) for x in [header, *records]) + "\n").encode()


def _with(i: int, **fields: Any) -> bytes:
    """The first four records, record ``i`` (0-based) changed: it is on line ``i + 2``."""
    recs = [dict(r) for r in RECORDS[:4]]
    recs[i].update(fields)
    return _dump(HEADER, recs)


def _static(**fields: Any) -> bytes:
    return _dump({"static": {**HEADER["static"], **fields}}, RECORDS[:3])


def cases() -> list[BadCapture]:
    good = _dump(HEADER, RECORDS[:4])
    nan, inf = float("nan"), float("inf")
    first_samples = RECORDS[0]["util_samples"]
    return [
        BadCapture("empty file", b"", None, "empty capture"),
        BadCapture("only blank lines", b"\n\n", None, "empty capture"),
        BadCapture("truncated mid-line", good[: len(good) - 300], 5, "truncated"),
        BadCapture("invalid JSON", _dump(HEADER, RECORDS[:2]).replace(b'{"t"', b"{t", 1), 2, "not JSON"),
        BadCapture("binary", bytes(range(256)) * 8, 1, "binary"),
        BadCapture("random bytes, no NUL", bytes(range(128, 256)) * 8, 1, "not UTF-8"),
        BadCapture("UTF-16 (LE, BOM)", good.decode().encode("utf-16"), 1, "UTF-16"),
        BadCapture("UTF-16 (BE, BOM)", good.decode().encode("utf-16-be").join([b"\xfe\xff", b""]), 1, "UTF-16"),
        BadCapture("Latin-1 text", good.replace(b"NVIDIA H200", "NVIDIA H200 \xe9".encode("latin-1")), 1, "UTF-8"),
        BadCapture(
            "deep nesting", good.replace(b'"procs": []', b'"procs": ' + b"[" * 100_000 + b"]" * 100_000, 1), 2, "nested"
        ),
        BadCapture("a 4,000-digit integer", _with(1, temp_C=int("9" * 4000)), 3, "temp_C"),
        BadCapture(
            "a 5,000-digit integer", good.replace(b'"temp_C": 29', b'"temp_C": 1' + b"0" * 5000, 1), 2, "digits"
        ),
        BadCapture("a line over the length bound", good + b'{"t": "' + b"x" * (5 * 2**20) + b'"}\n', 6, "longer than"),
        BadCapture("JSON array line", _dump(HEADER, [RECORDS[0], [1, 2, 3]]), 3, "JSON object"),
        BadCapture("no static header", _dump(RECORDS[0], RECORDS[1:4]), 1, "first line must be"),
        BadCapture(
            "static: missing uuid",
            _dump({"static": {"name": "x", "memory_total_bytes": 1, "power_limit_mW": 1}}, RECORDS[:3]),
            1,
            "uuid",
        ),
        BadCapture("static: negative memory", _static(memory_total_bytes=-1), 1, "memory_total_bytes"),
        BadCapture("static: NaN power limit", _static(power_limit_mW=nan), 1, "power_limit_mW"),
        BadCapture("static: bad PCI bus id", _static(pci_bus_id="zz"), 1, "pci_bus_id"),
        BadCapture("static: name a number", _static(name=5), 1, "name"),
        BadCapture("NaN power", _with(0, power_mW=nan), 2, "power_mW"),
        BadCapture("+Inf power", _with(0, power_mW=inf), 2, "power_mW"),
        BadCapture("-Inf energy", _with(1, energy_mJ=-inf), 3, "energy_mJ"),
        BadCapture("negative power", _with(2, power_mW=-5), 4, "power_mW"),
        BadCapture("negative temperature", _with(0, temp_C=-5), 2, "temp_C"),
        BadCapture("utilisation 150 %", _with(0, util_gpu_pct=150), 2, "util_gpu_pct"),
        BadCapture(
            "NaN utilisation sample", _with(1, util_samples=[[first_samples[-1][0] + 1, nan]]), 3, "util_samples"
        ),
        BadCapture("negative sample time", _with(1, util_samples=[[-1, 5]]), 3, "util_samples"),
        BadCapture("sample not a pair", _with(1, util_samples=[[1]]), 3, "util_samples"),
        BadCapture("NaN time", _with(1, t=nan), 3, "t"),
        BadCapture("time a string", _with(1, t="yesterday"), 3, "t"),
        BadCapture("time a boolean", _with(1, t=True), 3, "t"),
        BadCapture("time missing", _with(1, t=None).replace(b'"t": null, ', b""), 3, "t"),
        BadCapture("time goes back", _dump(HEADER, [RECORDS[1], RECORDS[0], RECORDS[2]]), 3, "not after"),
        BadCapture("time repeats", _dump(HEADER, [RECORDS[0], RECORDS[0]]), 3, "not after"),
        BadCapture("energy goes back", _with(2, energy_mJ=0), 4, "energy_mJ"),
        BadCapture("power a string", _with(0, power_mW="lots"), 2, "power_mW"),
        BadCapture("procs not a list", _with(0, procs=5), 2, "procs"),
        BadCapture("procs with a negative pid", _with(0, procs=[[-1, 5]]), 2, "procs"),
        BadCapture("proc_util 400 %", _with(0, proc_util=[[1, 400, 0, 1]]), 2, "proc_util"),
        BadCapture(
            "gpm NaN", _with(0, gpm={"sm_util": nan, "tensor_util": 0, "dram_bw_util": 0, "sm_occupancy": 0}), 2, "gpm"
        ),
        BadCapture("ECC count negative", _with(0, ecc_uncorrected_volatile=-3), 2, "ecc"),
        BadCapture("one sample only", _dump(HEADER, RECORDS[:1]), None, "at least two samples"),
    ]
