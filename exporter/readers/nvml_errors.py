"""NVML's return codes as the reader errors of ``base`` (one table, for calls and field values)."""

from __future__ import annotations

from typing import Any

from exporter.readers.base import GpuLost, NotSupported, ReaderError, ReaderUnavailable


def translate(n: Any, code: int | None, message: str, call: str, index: int | None) -> ReaderError:
    """The reader error for NVML return ``code`` (``n``: the pynvml module)."""
    if code in (n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_FUNCTION_NOT_FOUND, n.NVML_ERROR_NO_PERMISSION):
        return NotSupported(message, call=call, gpu=index)
    if code in (n.NVML_ERROR_GPU_IS_LOST, n.NVML_ERROR_RESET_REQUIRED, getattr(n, "NVML_ERROR_GPU_NOT_FOUND", -1)):
        return GpuLost(message, call=call, gpu=index)
    if code == n.NVML_ERROR_LIBRARY_NOT_FOUND:
        return ReaderUnavailable(message, call=call, gpu=index, library_missing=True)
    if code in (n.NVML_ERROR_UNINITIALIZED, n.NVML_ERROR_DRIVER_NOT_LOADED, n.NVML_ERROR_LIB_RM_VERSION_MISMATCH):
        return ReaderUnavailable(message, call=call, gpu=index)
    return ReaderError(message, call=call, gpu=index)
