"""Records of every format version load forever, and records round-trip through real JSON."""

import glob
import json
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from qex.base.states import FINAL
from qex.store.records import Attempt, Claims, PoolClaim, Status, Usage, load

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def test_every_stored_record_of_every_format_still_loads():
    paths = sorted(glob.glob(os.path.join(DATA, "status-v*.json")))
    assert len(paths) >= 4
    for path in paths:
        with open(path) as fh:
            raw = json.load(fh)
        rec = load(Status, raw)
        assert rec.id == raw["id"] and rec.state in FINAL
        assert rec.claims.mem == raw["claims"]["mem"]
        assert rec.attempts and rec.attempts[-1].state == rec.state


def test_a_newer_record_with_unknown_fields_and_an_older_one_missing_fields_both_load():
    with open(os.path.join(DATA, "status-v1-completed.json")) as fh:
        raw = json.load(fh)
    newer = {**raw, "format": 9, "future_field": {"x": 1}, "claims": {**raw["claims"], "gizmo": 3}}
    assert load(Status, newer).id == raw["id"]
    older = {k: raw[k] for k in ("id", "seq", "state", "command", "cwd", "owner", "uid")}
    rec = load(Status, older)
    assert rec.priority == 0 and rec.claims.cpu == 1.0 and rec.attempts == ()


text = st.text(max_size=20)
maybe_int = st.none() | st.integers(min_value=0, max_value=2**40)
claims = st.builds(
    Claims,
    cpu=st.integers(1, 64000).map(lambda m: m / 1000),
    mem=st.integers(0, 2**40),
    pools=st.dictionaries(
        st.from_regex(r"[a-z]{1,6}", fullmatch=True),
        st.builds(PoolClaim, count=st.integers(1, 8), size=maybe_int),
        max_size=3,
    ),
)
attempt = st.builds(
    Attempt,
    number=st.integers(1, 5),
    state=st.sampled_from(FINAL),
    claims=claims,
    exit_code=st.none() | st.integers(0, 255),
    usage=st.builds(Usage, max_rss=maybe_int),
)
status = st.builds(
    Status,
    id=text,
    seq=st.integers(0, 10**9),
    state=st.sampled_from(FINAL),
    command=st.lists(text, min_size=1, max_size=4).map(tuple),
    cwd=text,
    owner=text,
    uid=st.integers(0, 65535),
    claims=claims,
    attempts=st.lists(attempt, max_size=3).map(tuple),
    tags=st.lists(text, max_size=3).map(tuple),
    error=st.none() | text,
)


@settings(max_examples=150, deadline=None)
@given(status)
def test_a_record_round_trips_through_real_json(rec):
    assert load(Status, json.loads(json.dumps(rec.asdict()))) == rec


def test_the_read_check_takes_each_field_from_the_record_class_and_passes_its_defaults():
    """store/check.py's table of status.json's fields is derived from the Status class
    (one declaration): each field of the class with the JSON types of its annotation,
    no other, and every default as JSON passes the check."""
    from qex.store import check
    from qex.store.records import status_defaults

    assert list(check.STATUS_FIELDS) == list(Status.field_names())
    assert check.STATUS_FIELDS["ended_at"] == (int, float, type(None))  # float | None: any number, or null
    assert check.STATUS_FIELDS["tags"] == (list,) and check.STATUS_FIELDS["claims"] == (dict,)
    defaults = json.loads(json.dumps(status_defaults()))
    check.status(
        {**defaults, "id": "x", "seq": 1, "state": "queued", "command": ["true"], "cwd": "/", "owner": "me", "uid": 0}
    )


def test_the_read_check_refuses_a_damaged_field_it_once_let_through():
    import pytest

    from qex.store import check

    for field, bad in (
        ("supervisor_lost", "yes"),
        ("template", "echo {}"),
        ("queue_pauses", 3),
        ("rerun_of", 7),
        ("peer_lock", []),
    ):
        with pytest.raises(check.Damaged, match=field):
            check.status({"id": "x", field: bad})
