"""The fact table's NVML reads: every field value of a round in one ``nvmlDeviceGetFieldValues``
call per GPU, per-link fields once per NVLink link (the link as scope id), a function per fact.

NVML answers each field with its own return code. A field a GPU does not support (or a link of it)
is not asked again; a fact none of whose fields is supported reads as ``NotSupported``, and the
sampler stops asking for it. The NVLink links of a GPU are counted once
(``NVML_FI_DEV_NVLINK_LINK_COUNT``); none, or NotSupported, means the GPU has no NVLink.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from exporter.readers.base import NotSupported, ReaderError, Readout, fatal
from exporter.readers.nvml_errors import translate
from exporter.readers.probes import Call, FactValue, Field, Probe

_VALUE_MEMBER = {
    "NVML_VALUE_TYPE_DOUBLE": "dVal",
    "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal",
    "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
    "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal",
    "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
    "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal",
}
Request = tuple[Probe, int | None, int]  # the fact, its link (None: not per link), the field id


def decode(n: Any, v: Any) -> float:
    """A ``c_nvmlFieldValue_t``'s value, by the union member its ``valueType`` names."""
    for const, member in _VALUE_MEMBER.items():
        if v.valueType == getattr(n, const, None):
            return float(getattr(v.value, member))
    return float(v.value.ullVal)


class FieldReads:
    """What NvmlReader remembers per GPU for the fact table: its NVLink links, and the (field,
    scope) pairs NVML said it does not support."""

    def __init__(self) -> None:
        self._links: dict[int, tuple[int, ...]] = {}
        self._skip: dict[int, set[tuple[int, int]]] = {}

    def forget(self, index: int) -> None:
        """A GPU looked up again (after it was lost): learn its links and fields afresh."""
        self._links.pop(index, None)
        self._skip.pop(index, None)

    def read(self, n: Any, handle: Any, index: int, probes: Sequence[Probe]) -> Readout:
        out: Readout = {}
        links = self.links(n, handle, index) if any(p.per_link for p in probes) else ()
        skip = self._skip.setdefault(index, set())
        requests: list[Request] = []
        for p in probes:
            got = self._requests(n, p, index, links, skip)
            if isinstance(got, ReaderError):
                out[p.name] = got
            else:
                requests += got
        if requests:
            out.update(self._batch(n, handle, index, requests, skip))
        return out

    def call(self, n: Any, handle: Any, index: int, p: Probe, nv: Call) -> FactValue | ReaderError:
        """A fact read by an NVML function of its own (per link: once per link)."""
        fn: Callable[..., Any] | None = getattr(n, nv.function, None)
        if fn is None:
            return NotSupported(f"{nv.function} is not in this pynvml", call=p.name, gpu=index)
        args = [getattr(n, a) for a in nv.args]
        links = self.links(n, handle, index) if p.per_link else ()
        if isinstance(links, ReaderError):
            return links.renamed(p.name)
        if p.per_link and not links:
            return NotSupported("no NVLink on this GPU", call=p.name, gpu=index)
        values: dict[int, float] = {}
        first: ReaderError | None = None
        for link in links if p.per_link else (None,):
            try:
                raw = fn(handle, *args) if link is None else fn(handle, link, *args)
            except n.NVMLError as e:
                err = translate(n, getattr(e, "value", None), str(e), p.name, index)
                if fatal(err):
                    raise err from e
                first = first or err
                continue
            if link is None:
                return float(raw) * nv.scale
            values[link] = float(raw) * nv.scale
        return values if values else (first or NotSupported("no link answered", call=p.name, gpu=index))

    def links(self, n: Any, handle: Any, index: int) -> tuple[int, ...] | ReaderError:
        """The GPU's NVLink link indices, counted once; an error (not NotSupported) is retried."""
        if index in self._links:
            return self._links[index]
        fid = getattr(n, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
        err: ReaderError | None = None
        count = 0
        if fid is not None:
            try:
                v = n.nvmlDeviceGetFieldValues(handle, [fid])[0]
                code = int(v.nvmlReturn)
                if code == n.NVML_SUCCESS:
                    count = max(0, min(int(decode(n, v)), int(getattr(n, "NVML_NVLINK_MAX_LINKS", 64))))
                else:
                    err = translate(n, code, str(n.NVMLError(code)), "nvlink_links", index)
            except n.NVMLError as e:
                err = translate(n, getattr(e, "value", None), str(e), "nvlink_links", index)
        if err is not None and fatal(err):
            raise err
        if err is not None and not isinstance(err, NotSupported):
            return err
        self._links[index] = tuple(range(count))
        return self._links[index]

    def _requests(
        self, n: Any, p: Probe, index: int, links: tuple[int, ...] | ReaderError, skip: set[tuple[int, int]]
    ) -> list[Request] | ReaderError:
        assert isinstance(p.nvml, Field)
        fid = getattr(n, p.nvml.field, None)
        if fid is None:
            return NotSupported(f"{p.nvml.field} is not in this pynvml", call=p.name, gpu=index)
        if not p.per_link:
            gone = (fid, 0) in skip
            return (
                NotSupported("NVML does not report it here", call=p.name, gpu=index) if gone else [(p, None, int(fid))]
            )
        if isinstance(links, ReaderError):
            return links.renamed(p.name)
        if not links:
            return NotSupported("no NVLink on this GPU", call=p.name, gpu=index)
        asked: list[Request] = [(p, link, int(fid)) for link in links if (fid, link) not in skip]
        return asked or NotSupported("NVML reports it for none of the links", call=p.name, gpu=index)

    def _batch(self, n: Any, handle: Any, index: int, requests: list[Request], skip: set[tuple[int, int]]) -> Readout:
        """One ``nvmlDeviceGetFieldValues`` for every request; each fact's value or first error."""
        ids = [fid if link is None else (fid, link) for _, link, fid in requests]
        try:
            values = n.nvmlDeviceGetFieldValues(handle, ids)
        except n.NVMLError as e:
            err = translate(n, getattr(e, "value", None), str(e), "field_values", index)
            if fatal(err):
                raise err from e
            return {p.name: err.renamed(p.name) for p, _, _ in requests}
        out: Readout = {}
        per_link: dict[str, dict[int, float]] = {}
        for (p, link, fid), v in zip(requests, values, strict=True):
            code = int(v.nvmlReturn)
            if code != n.NVML_SUCCESS:
                err = translate(n, code, str(n.NVMLError(code)), p.name, index)
                if fatal(err):
                    raise err
                if isinstance(err, NotSupported):
                    skip.add((fid, 0 if link is None else link))
                kept = out.get(p.name)
                if kept is None or isinstance(kept, NotSupported):  # a transient error is retried
                    out[p.name] = err
                continue
            assert isinstance(p.nvml, Field)
            x = decode(n, v) * p.nvml.scale
            if link is None:
                out[p.name] = x
            else:
                per_link.setdefault(p.name, {})[link] = x
        for name, by_link in per_link.items():
            out[name] = by_link  # the links that answered; the others' errors are not the fact's
        return out
