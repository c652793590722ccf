"""The records qex writes are Plain records (qex.base.plain), declared once in
qex.store.records: the defaults merged under every record, and spec.json, are what
the classes declare; and Plain records behave as the attrs classes they replaced."""

import json
import os
import random
from fractions import Fraction

import pytest

from qex.base.plain import Factory, Plain
from qex.config.keys import Percent
from qex.store import records


def test_status_defaults_are_every_optional_field_of_status_with_its_default_as_json():
    defaults = records.status_defaults()
    optional = [
        n for n in records.Status.field_names() if n not in ("id", "seq", "state", "command", "cwd", "owner", "uid")
    ]
    assert list(defaults) == optional
    assert defaults["claims"] == {"cpu": 1.0, "mem": 0, "pools": {}} and defaults["tags"] == []
    assert defaults["logs_dropped"]["incomplete"] is False and defaults["oom_retries"] == 1
    assert defaults["usage"] == dict.fromkeys(records.Usage.field_names())


def test_status_defaults_are_fresh_each_time():
    a = records.status_defaults()
    a["tags"].append("x")
    a["claims"]["pools"]["gpu"] = {}
    b = records.status_defaults()
    assert b["tags"] == [] and b["claims"]["pools"] == {}


def test_the_spec_of_a_submission_is_written_as_its_fields_and_reads_back_the_same():
    kw = dict(
        id="j",
        command=("python", "train.py"),
        cwd="/w",
        env={"A": "1"},
        nice=5,
        hints=True,
        request={"tags": ["a"], "claims": ["net=1"]},
    )
    spec = records.Spec(**kw)
    written = json.loads(json.dumps(spec.as_json()))
    assert written == {
        **kw,
        "command": ["python", "train.py"],
        "format": records.FORMAT,
        "io_class": None,
        "oom_score_adj": None,
    }
    assert records.load(records.Spec, written) == spec


def test_a_record_from_a_dict_has_its_nested_records_and_keeps_what_it_does_not_know():
    rec = records.load(
        records.Status,
        {
            "id": "x",
            "seq": 1,
            "state": "completed",
            "command": ["true"],
            "cwd": "/",
            "owner": "me",
            "uid": 0,
            "claims": {"cpu": 0.5, "mem": 8, "pools": {"gpu": {"count": 1, "size": 4}}, "gizmo": 3},
            "attempts": [{"number": 1, "state": "completed", "usage": {"max_rss": 5}}],
            "future": 1,
        },
    )
    assert rec.claims.pools["gpu"] == records.PoolClaim(1, 4) and rec.claims.millicores == 500
    assert rec.attempts[0].usage.max_rss == 5 and rec.attempts[0].claims == records.Claims()
    assert rec.command == ("true",) and rec.final and rec.priority == 0
    # a newer qex's keys are no fields, but a rewrite keeps them, at any depth
    assert "future" not in records.Status.field_names() and rec.future == 1
    with pytest.raises(TypeError, match="no field 'future'"):
        rec.evolve(future=2)
    again = rec.evolve(state="failed").asdict()
    assert again["future"] == 1 and again["claims"]["gizmo"] == 3 and again["state"] == "failed"
    assert again["command"] == ["true"] and again["attempts"][0]["usage"]["max_rss"] == 5


def test_a_record_without_a_field_every_reader_needs_is_damaged_with_the_remedy(tmp_path):
    import pytest

    from qex.base.errors import BrokenRecord
    from qex.store import check
    from qex.store.state import Store

    whole = {"id": "j1", "seq": 1, "state": "completed", "command": ["true"], "cwd": "/", "owner": "me", "uid": 0}
    check.status(whole)
    assert set(check.STATUS_REQUIRED) == {"id", "seq", "state", "command", "cwd", "owner", "uid"}
    for name in check.STATUS_REQUIRED:
        with pytest.raises(check.Damaged, match=f"it has no {name}|the state 'None' is not"):
            check.status({k: v for k, v in whole.items() if k != name})
    for attempt, missing in (({}, "number"), ({"number": 1}, "state")):  # (the fuzz test found the first)
        with pytest.raises(check.Damaged, match=f"attempts\\[0\\] has no {missing}"):
            check.status({**whole, "attempts": [attempt]})
    store = Store(str(tmp_path / "state"))
    store.ensure()
    os.makedirs(store.job_dir("j1"))
    with open(store.path("j1", "status.json"), "w") as fh:
        json.dump({k: v for k, v in whole.items() if k != "command"}, fh)
    with pytest.raises(BrokenRecord, match="it has no command.*qex clean j1 removes it"):
        store.read_status("j1")


class Job(Plain):
    id: str
    tags: list = Factory(list)
    priority: int = 0


class Frozen(Plain, frozen=True):
    name: str
    devices: tuple = ()


def test_a_plain_record_has_fresh_defaults_value_equality_a_repr_evolve_and_refuses_bad_args():
    a, b = Job("x"), Job(id="x")
    assert a == b and a.tags == [] and a.tags is not b.tags
    assert repr(Job("x", ["t"], 2)) == "Job(id='x', tags=['t'], priority=2)"
    c = a.evolve(priority=3)
    assert (c.id, c.priority, a.priority) == ("x", 3, 0)
    a.priority = 1
    assert a != b and a.asdict() == {"id": "x", "tags": [], "priority": 1}
    for bad in (lambda: Job(), lambda: Job("x", nope=1), lambda: Job("x", id="y"), lambda: Job(1, 2, 3, 4)):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(TypeError):
        hash(a)


def test_a_frozen_record_refuses_assignment_hashes_by_value_and_still_evolves():
    f = Frozen("gpu", (1, 2))
    with pytest.raises(AttributeError):
        f.name = "x"
    assert hash(f) == hash(Frozen("gpu", (1, 2))) and {f: 1}[Frozen("gpu", (1, 2))] == 1
    assert f.asdict() == {"name": "gpu", "devices": [1, 2]} and f.evolve(name="n").name == "n"


def test_a_field_without_default_after_one_with_is_refused():
    with pytest.raises(TypeError):

        class Bad(Plain):  # noqa: F841
            a: int = 0
            b: int


def test_a_percentage_of_a_total_is_exact_without_fractions():
    rng = random.Random(7)
    values = [75, 90, 33.3, 0.1, 1e-05, 1.5e-07, 12.345678, 100, 50.5, 99.99999, 66.66666666666667]
    values += [rng.uniform(1e-6, 100) for _ in range(1000)]
    for v in values:
        p = Percent(v)
        for total in (1000, 2000, 7, 8 << 30, 123456789):
            assert p.of(total) == int(Fraction(str(p.value)) * total / 100), (v, total)
    for bad in (0, -1, 100.5, "x"):
        with pytest.raises(ValueError):
            Percent(bad)
