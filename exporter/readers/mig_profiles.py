"""MIG GPU instance profiles, and the layouts the replay takes (``--replay-mig``).

A profile is NVIDIA's (the MIG user guide's tables): compute slices, SMs, memory in MB (rounded so that
``readers.mig_profile()`` gives the name back), memory slices. The fake reader presents an H100 80GB's;
the replay (the bundled capture is an H200) takes an H100 80GB's or an H200 141GB's: the instances it
presents are synthetic either way, the capture holds no MIG instance.

A layout is written as mig-parted (NVIDIA's MIG partition editor) names its configurations:
``all-1g.10gb`` (as many instances of that profile as one GPU holds: seven 1g.10gb, two 3g.40gb) or
one GPU's profiles, ``3g.40gb,2g.20gb,2g.20gb``; every replayed GPU gets it. A layout must fit the
GPU's 7 compute and 8 memory slices (NVIDIA's placement rules are finer; these two are what charging
needs: an instance's share is its compute slices over 7).
"""

from __future__ import annotations

from collections.abc import Mapping

Profile = tuple[int, int, int, int]  # compute slices, SMs, memory MB, memory slices

SLICES, SMS, MEMORY_SLICES = 7, 132, 8  # an H100's or H200's whole GPU

H100_MIG: dict[str, Profile] = {
    "1g.10gb": (1, 16, 9856, 1),
    "1g.20gb": (1, 16, 19968, 2),
    "2g.20gb": (2, 32, 19968, 2),
    "3g.40gb": (3, 60, 40192, 4),
    "4g.40gb": (4, 64, 40192, 4),
    "7g.80gb": (7, 132, 81408, 8),
}
"""The H100 80GB's GPU instance profiles."""

H200_MIG: dict[str, Profile] = {
    "1g.18gb": (1, 16, 17920, 1),
    "1g.35gb": (1, 16, 35584, 2),
    "2g.35gb": (2, 32, 35584, 2),
    "3g.71gb": (3, 60, 72448, 4),
    "4g.71gb": (4, 64, 72448, 4),
    "7g.141gb": (7, 132, 144128, 8),
}
"""The H200 141GB's GPU instance profiles (memory sizes synthetic: rounded to give the names)."""

TABLES: dict[str, Mapping[str, Profile]] = {"H100 80GB": H100_MIG, "H200 141GB": H200_MIG}


def _table(profile: str) -> Mapping[str, Profile] | None:
    return next((t for t in TABLES.values() if profile in t), None)


def known() -> list[str]:
    return [p for t in TABLES.values() for p in t]


def parse_layout(text: str) -> tuple[str, ...]:
    """The profiles of one GPU's layout, from ``all-PROFILE`` or ``P1,P2,...``; ValueError (one line)
    for an unknown profile, profiles of two different GPUs, or a layout that does not fit."""
    text = text.strip()
    if text.startswith("all-"):
        name = text.removeprefix("all-")
        table = _table(name)
        if table is None:
            raise ValueError(f"unknown MIG profile {name!r}; known: {', '.join(known())}")
        slices, _, _, memory = table[name]
        return (name,) * min(SLICES // slices, MEMORY_SLICES // memory)
    profiles = tuple(p.strip() for p in text.split(","))
    if not text or not all(profiles):
        raise ValueError("give all-PROFILE (e.g. all-1g.10gb) or one GPU's profiles (e.g. 3g.40gb,2g.20gb)")
    unknown = [p for p in profiles if _table(p) is None]
    if unknown:
        raise ValueError(f"unknown MIG profile {unknown[0]!r}; known: {', '.join(known())}")
    tables = {id(_table(p)) for p in profiles}
    if len(tables) > 1:
        raise ValueError("profiles of different GPUs (an H100 80GB's or an H200 141GB's, not both)")
    table = _table(profiles[0]) or {}
    compute = sum(table[p][0] for p in profiles)
    memory = sum(table[p][3] for p in profiles)
    if compute > SLICES or memory > MEMORY_SLICES:
        raise ValueError(
            f"does not fit one GPU: {compute} compute slices of {SLICES}, {memory} memory slices of {MEMORY_SLICES}"
        )
    return profiles


def profile(name: str) -> Profile:
    """A known profile's figures (KeyError for an unknown one)."""
    table = _table(name)
    if table is None:
        raise KeyError(name)
    return table[name]
