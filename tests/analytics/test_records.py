"""Each Slurm job's record chosen from a window's label sets (analytics.sources.records): a claim
is the one naming most fields, the least in text order among those, whatever order the sets come
in; and a window's sets are its days' together."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.sources.base import LabelSet, RecordSets, label_sets
from analytics.sources.records import records_of

value = st.sampled_from(["", "a", "b", "gpu", "=x"])


@st.composite
def claim(draw: st.DrawFn) -> LabelSet:
    labels = {
        "cluster": draw(st.sampled_from(["", "east"])),
        "instance": draw(st.sampled_from(["n1:9100", "n2:9100"])),
        "job_id": draw(st.sampled_from(["", "7", "8"])),
        "user": draw(st.sampled_from(["", "alice"])),
        "account": draw(value),
        "partition": draw(value),
        "qos": draw(value),
    }
    return tuple(sorted((k, v) for k, v in labels.items() if v))  # Prometheus drops empty labels


@settings(max_examples=200, deadline=None)
@given(st.lists(claim(), max_size=12), st.randoms())
def test_a_claim_is_chosen_whatever_the_order(claims: list[LabelSet], rnd: random.Random) -> None:
    got = records_of(RecordSets("cluster", frozenset(), frozenset(claims)))
    want: dict[tuple[str, str, str], tuple[str, str, str]] = {}
    for labels in claims:
        d = dict(labels)
        if not d.get("job_id"):
            continue
        named = (d.get("account", ""), d.get("partition", ""), d.get("qos", ""))
        key = (d.get("cluster", ""), d.get("instance", ""), d["job_id"])
        candidates = [*([want[key]] if key in want else []), named]
        want[key] = min(candidates, key=lambda n: (-sum(map(bool, n)), n))
    assert dict(got.claims_by_target) == want
    shuffled = list(claims)
    rnd.shuffle(shuffled)
    again = records_of(RecordSets("cluster", frozenset(), frozenset(shuffled)))
    assert again == got


@settings(max_examples=100, deadline=None)
@given(st.lists(claim(), max_size=12), st.lists(claim(), max_size=12))
def test_two_days_sets_give_the_windows_records(a: list[LabelSet], b: list[LabelSet]) -> None:
    day1 = RecordSets("cluster", frozenset(), frozenset(a))
    day2 = RecordSets("cluster", frozenset(), frozenset(b))
    assert records_of(day1 | day2) == records_of(RecordSets("cluster", frozenset(), frozenset(a + b)))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from(["instance", "job_id", "user", "account"]), st.sampled_from(["", "a", "b", "ü"])
        )
    )
)
def test_label_sets_share_equal_pairs_and_equal_the_sets_as_they_came(rows: list[dict[str, str]]) -> None:
    """The sets are the sets of the rows, and a (name, value) pair found in several is one tuple."""
    got = label_sets(sorted(r.items()) for r in rows)
    assert got == frozenset(tuple(sorted(r.items())) for r in rows)
    pairs = [p for labels in got for p in labels]
    assert len({id(p) for p in pairs}) == len(set(pairs))
