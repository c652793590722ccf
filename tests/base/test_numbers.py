"""The one number check (qex/base/numbers.py) and the read checks that use it:
records, index entries, journal lines, peer records, pid files, learn.json."""

import json

import pytest

from qex.base import numbers as N
from qex.store import check
from qex.store.index import entry_of, usable_event

BAD = [1e308, float("nan"), float("inf"), float("-inf"), -1, -0.5, True, False, "1", None, [], {}, 2**70]


# ---- the check itself ---------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD)
def test_a_value_that_is_no_number_within_the_bounds_fails(value):
    assert not N.ok(value, N.CORES)
    with pytest.raises(N.BadNumber):
        N.number(value, N.CORES)


@pytest.mark.parametrize(
    "value,most,least,whole,good",
    [
        (0, 1, 0, False, True),
        (1, 1, 0, False, True),
        (0.5, 1, 0, False, True),
        (0.5, 1, 0, True, False),
        (1.0, 1, 0, True, False),
        (2, 1, 0, False, False),
        (-1, 1, -1, False, True),
        (-2, 1, -1, False, False),
        (N.TIME, N.TIME, 0, False, True),
        (N.TIME + 1, N.TIME, 0, False, False),
        (N.PID, N.PID, 1, True, True),
        (0, N.PID, 1, True, False),
    ],
)
def test_the_bounds_are_inclusive_and_whole_refuses_a_float(value, most, least, whole, good):
    assert N.ok(value, most, least, whole) is good


def test_the_message_says_what_the_value_is_and_stays_short():
    for value, words in (
        (1e308, "1e+308"),
        (float("nan"), "NaN"),
        (True, "true"),
        ("1" * 500, "the text"),
        (10**400, "bits"),
        ({}, "object"),
        ([], "array"),
        (-2, "-2"),
    ):
        with pytest.raises(N.BadNumber) as info:
            N.number(value, N.CORES)
        assert words in str(info.value) and len(str(info.value)) < 120, str(info.value)


def test_all_ok_is_ok_for_each_named_number():
    bounds = (("a", 0, 10, True), ("b", 0, 1.5, False))
    assert N.all_ok({"a": 3, "b": 1.5}, bounds) and N.all_ok({"a": None}, bounds) and N.all_ok({}, bounds)
    for bad in ({"a": 3.0}, {"a": True}, {"b": float("nan")}, {"b": 2}, {"a": -1}):
        assert not N.all_ok(bad, bounds), bad


# ---- records, entries, journal lines --------------------------------------------------------


def record(**fields) -> dict:
    rec = {
        "id": "j1",
        "seq": 1,
        "state": "queued",
        "command": ["true"],
        "cwd": "/",
        "owner": "me",
        "uid": 0,
        "claims": {"cpu": 1.0, "mem": 100, "pools": {"gpu": {"count": 1, "size": None}}},
        "assigned": [{"pool": "gpu", "devices": [0], "size": None}],
        "submitted_at": 1.7e9,
        "usage": {"max_rss": 5, "cpu_secs": 0.1, "peak_from": "rusage", "oom_kills": 0},
        "logs_dropped": {
            "stdout_bytes": 0,
            "stdout_lines": 0,
            "stderr_bytes": 0,
            "stderr_lines": 0,
            "incomplete": False,
        },
        "attempts": [{"number": 1, "state": "failed", "claims": {"cpu": 1.0, "mem": 100}, "exit_code": 3}],
    }
    for path, value in fields.items():
        *parents, last = path.split(".")
        at = rec
        for p in parents:
            at = at[int(p)] if isinstance(at, list) else at[p]
        at[last] = value
    return rec


NUMBER_FIELDS = [
    "seq",
    "uid",
    "priority",
    "submitted_at",
    "started_at",
    "ended_at",
    "blocked_since",
    "pid",
    "supervisor_pid",
    "exit_code",
    "attempt",
    "passed_by",
    "timeout",
    "retries",
    "oom_retries",
    "max_queue_time",
    "queue_pause_secs",
    "claims.cpu",
    "claims.mem",
    "claims.pools.gpu.count",
    "claims.pools.gpu.size",
    "assigned.0.size",
    "usage.max_rss",
    "usage.cpu_secs",
    "usage.oom_kills",
    "logs_dropped.stdout_bytes",
    "attempts.0.exit_code",
    "attempts.0.claims.cpu",
    "attempts.0.ended_at",
]


def test_a_complete_record_within_every_bound_passes_the_read_check():
    check.status(record())


@pytest.mark.parametrize("field", NUMBER_FIELDS)
@pytest.mark.parametrize("value", [1e308, float("nan"), -2, 2**70])
def test_a_record_with_a_number_out_of_its_bounds_is_damaged_and_the_field_is_named(field, value):
    if field == "priority" and value == -2:
        value = -(2**70)  # (a priority may be below zero)
    with pytest.raises(check.Damaged) as info:
        check.status(record(**{field: value}))
    assert field.split(".")[-1] in str(info.value) or field.split(".")[0] in str(info.value)


@pytest.mark.parametrize(
    "field,value",
    [("pid", 0), ("exit_code", 256), ("uid", 2**32), ("assigned.0.devices", [N.DEVICE + 1]), ("ended_at", 4e10)],
)
def test_a_number_outside_what_the_machine_allows_is_damaged(field, value):
    with pytest.raises(check.Damaged):
        check.status(record(**{field: value}))


def test_every_number_field_of_the_record_has_its_bound():
    """Every number read is checked: each field of the read check's table that holds a number
    has a bound (a new field cannot be added without one)."""

    def numeric(types):
        return any(t in (int, float) for t in (types if isinstance(types, tuple) else (types,)))

    for table, bounds in (
        (check.STATUS_FIELDS, check.STATUS_NUMBERS),
        (check.ATTEMPT_FIELDS, check.ATTEMPT_NUMBERS),
        (check.ENTRY_FIELDS, check.ENTRY_NUMBERS),
    ):
        assert {k for k, t in table.items() if numeric(t)} <= set(bounds), set(table) - set(bounds)


def test_usage_and_logs_dropped_have_a_bound_for_each_number_of_their_class():
    from qex.store.records import LogsDropped, Usage, field_types

    for cls, bounds in ((Usage, check.USAGE_NUMBERS), (LogsDropped, check.DROPPED_NUMBERS)):
        numeric = {name for name, types in field_types(cls).items() if int in types and bool not in types}
        assert numeric == set(bounds)


def test_the_entry_of_a_record_at_every_bound_passes_the_entry_check():
    """What a pass makes of a record the read check takes, the index check takes too:
    else the pass would take it again from its record on every load."""
    rec = record(
        seq=N.SEQ,
        uid=N.UID,
        priority=-N.PRIORITY,
        submitted_at=N.TIME,
        max_queue_time=N.DURATION,
        queue_pause_secs=N.DURATION,
        attempt=1,
        passed_by=N.SEQ,
        pid=N.PID,
        supervisor_pid=1,
        **{
            "claims.cpu": N.CORES,
            "claims.mem": N.BYTES,
            "claims.pools.gpu.count": N.COUNT,
            "claims.pools.gpu.size": N.BYTES,
            "assigned.0.devices": [N.DEVICE],
            "assigned.0.size": N.BYTES,
        },
    )
    check.status(rec)
    entry = json.loads(json.dumps(entry_of(rec)))
    check.index_entry("j1", entry)
    assert check.index({"jobs": {"j1": entry}}) == {}
    del rec["uid"]
    check.index_entry("j1", entry_of(rec))  # (a record that names no uid: -1)


@pytest.mark.parametrize(
    "key,value",
    [
        ("cpu", 1e308),
        ("cpu", -2000),
        ("cpu", 1.5),
        ("mem", float("nan")),
        ("deadline", float("inf")),
        ("pid", 0),
        ("pid", 2.0),
        ("attempt", True),
        ("seq", 2**70),
        ("submitted_at", -1),
    ],
)
def test_an_index_entry_out_of_its_bounds_is_named_and_the_others_are_kept(key, value):
    good = entry_of(record())
    data = {"seq": 1, "jobs": {"good": good, "bad": {**good, key: value}}}
    bad = check.index(data)
    assert list(bad) == ["bad"] and key in bad["bad"]
    assert list(check.usable_jobs(data["jobs"])) == ["good"]


def test_an_index_whose_counters_are_out_of_bounds_is_damaged_whole():
    for key, value in (("seq", -1), ("offset", 1e308), ("next_job", float("nan")), ("saved_at", 1e20)):
        with pytest.raises(check.Damaged):
            check.index({key: value, "jobs": {}})


def test_an_entry_or_a_left_out_job_that_names_no_job_directory_is_never_taken():
    good = entry_of(record())
    bad = check.index({"jobs": {"../x": good, "ok": good}, "damaged": {"../../etc": "x", "j2": "why"}})
    assert bad == {"../x": bad["../x"], "j2": "why"}


@pytest.mark.parametrize("seq", [1e308, float("nan"), -1, True, "3", 2**70])
def test_a_journal_event_with_a_bad_seq_or_record_is_passed_over(seq):
    assert usable_event({"event": "job", "seq": 5, "job": record()}, 0) is not None
    assert usable_event({"event": "job", "seq": seq, "job": record()}, 0) is None
    assert usable_event({"event": "job", "seq": 5, "job": record(**{"claims.cpu": float("nan")})}, 0) is None


def test_a_journal_line_with_a_bad_seq_counts_no_seq():
    from qex.store import journal

    lines = b"".join(
        json.dumps(e).encode() + b"\n"
        for e in (
            {"event": "job", "seq": 3, "job": {}},
            {"event": "job", "seq": 1e308, "job": {}},
            {"event": "job", "seq": 2**70, "job": {}},
            {"event": "job", "seq": True, "job": {}},
        )
    )
    events, done, highest = journal._whole_appends(lines)
    assert highest == 3 and len(events) == 4 and done == len(lines)


# ---- peer records, pid files, learn.json ---------------------------------------------------------


@pytest.mark.parametrize(
    "field,value",
    [
        ("cpu", 1e308),
        ("cpu", float("nan")),
        ("cpu", -2),
        ("cpu", True),
        ("mem", 1.5),
        ("mem", -1),
        ("pools", {"net": 2**70}),
        ("devices", [{"pool": "gpu", "devices": [4096]}]),
        ("devices", [{"pool": "gpu", "devices": [0], "size": float("inf")}]),
    ],
)
def test_a_peer_record_with_a_number_out_of_its_bounds_is_no_record(field, value):
    from qex.users import peer_record

    job = {"cpu": 1.0, "mem": 10, "lock": None, **{field: value}}
    raw = json.dumps({"kind": peer_record.KIND, "format": 1, "jobs": [job]}).encode()
    with pytest.raises(peer_record.BadRecord):
        peer_record.parse(raw)
    good = json.dumps({"kind": peer_record.KIND, "format": 1, "jobs": [{"cpu": 1.0, "mem": 10}]}).encode()
    assert peer_record.parse(good)["jobs"][0]["cpu"] == 1000


@pytest.mark.parametrize(
    "text,launched,intent",
    [
        (b"123 456\n", (123, 456), 123),
        (b"0 456\n", None, None),
        (b"-1 456\n", None, None),
        (b"99999999 1\n", None, None),
        (b"12 -5\n", None, 12),
        (b"12\n", (12, None), 12),
    ],
)
def test_a_pid_file_names_no_pid_but_a_process_s(tmp_path, text, launched, intent):
    from qex.linux import pidfile

    path = tmp_path / "pid"
    path.write_bytes(text)
    assert pidfile.launched(str(path)) == launched
    path.write_bytes(b"- " + text)
    assert pidfile.intent(str(path)) == intent


def test_a_learned_value_above_the_machine_is_passed_over_and_said(tmp_path):
    from qex.jobs import learn

    cmd = ["train"]
    learn.teach_locked(str(tmp_path), [(cmd, None, "peak", 300 << 20, "t")])
    store = json.loads((tmp_path / learn.FILE).read_text())
    store["commands"][learn.key_of(cmd)]["s"].append(["peak", 2**70])
    (tmp_path / learn.FILE).write_text(json.dumps(store))
    (claim, _words), warning = learn.claim_for(str(tmp_path), cmd, None, 0.0, most=1 << 30)
    assert claim == 300 << 20 and "passed over" in warning
    (claim, _words), warning = learn.claim_for(str(tmp_path), cmd, None, 0.0, most=1 << 80)
    assert claim == 300 << 20 and warning is not None, "above every machine: never a value"


# ---- what qex takes from a person is what it reads back -------------------------------------------


def test_cores_sizes_and_durations_a_person_gives_are_within_the_read_bounds():
    from qex.base.errors import SpecError
    from qex.base.units import parse_cpu, parse_duration, parse_size

    assert parse_cpu(str(N.CORES), "--cpu") == N.MILLICORES
    assert parse_size(f"{N.BYTES}", "--mem") == N.BYTES
    for call in (
        lambda: parse_cpu(str(N.CORES + 1), "--cpu"),
        lambda: parse_size(f"{N.BYTES + 1}", "--mem"),
        lambda: parse_duration("1e16", "--timeout"),
        lambda: parse_duration(f"{10**16}", "--timeout"),
    ):
        with pytest.raises(SpecError):
            call()


def test_submit_refuses_counts_and_a_priority_out_of_the_read_bounds(q):
    for args in (("--retries", str(N.COUNT + 1)), ("--oom-retries", str(2**70)), ("--priority", str(2**63))):
        proc = q.run("submit", *args, "--", "true")
        assert proc.returncode == 121 and args[0] in proc.stderr, (args, proc.stderr)
    assert q.records() == []


def test_a_config_count_above_the_bound_is_refused(q):
    q.write_config(f"[defaults]\nretries = {N.COUNT + 1}\n")
    proc = q.run("config", "show")
    assert proc.returncode != 0 and "retries" in proc.stderr
    q.write_config('[[pool]]\nname = "gpu"\ndevices = [' + ", ".join(['"1GB"'] * (N.DEVICE + 2)) + "]\n")
    proc = q.run("config", "show")
    assert proc.returncode != 0 and "at most" in proc.stderr
