"""The plain forms of the submit path agree with the one declaration of the
records (the attrs classes of qex.store.records), and the small plain records
(qex.base.plain) behave as the attrs classes they replaced."""

import json
import random
from fractions import Fraction

import attrs
import pytest

from qex.base.plain import Factory, Plain
from qex.config.keys import Percent
from qex.store import records


def defaults_from_the_classes() -> dict:
    out = {}
    for f in attrs.fields(records.Status):
        if f.default is attrs.NOTHING:
            continue
        value = f.default.factory() if isinstance(f.default, attrs.Factory) else f.default
        out[f.name] = (
            attrs.asdict(value) if attrs.has(type(value)) else (list(value) if isinstance(value, tuple) else value)
        )
    return out


def test_status_defaults_are_what_status_declares():
    assert records.status_defaults() == defaults_from_the_classes()
    assert list(records.status_defaults()) == list(defaults_from_the_classes())


def test_status_defaults_are_fresh_each_time():
    a = records.status_defaults()
    a["tags"].append("x")
    a["claims"]["pools"]["gpu"] = {}
    assert records.status_defaults() == defaults_from_the_classes()


def test_the_spec_of_a_submission_is_what_spec_declares():
    assert records.NewSpec.field_names() == tuple(f.name for f in attrs.fields(records.Spec))
    kw = dict(
        id="j",
        command=("python", "train.py"),
        cwd="/w",
        env={"A": "1"},
        nice=5,
        hints=True,
        request={"tags": ["a"], "claims": ["net=1"]},
    )
    new, declared = records.NewSpec(**kw), records.Spec(**kw)
    as_json = lambda d: json.dumps(d, sort_keys=True)  # noqa: E731 (spec.json is written as JSON)
    assert as_json(new.as_json()) == as_json(attrs.asdict(declared)) == as_json(records.spec_json(declared))
    assert records.spec_json(new) == new.as_json()
    bare = dict(id="j", command=("true",), cwd="/", env={})
    assert as_json(records.NewSpec(**bare).as_json()) == as_json(attrs.asdict(records.Spec(**bare)))
    # and spec.json reads back as the Spec it is
    from qex.store import codec

    assert codec.load(records.Spec, json.loads(json.dumps(new.as_json()))) == declared


def test_the_record_classes_are_module_attributes():
    assert records.Status.__qualname__ == "Status" and records.Status.__module__ == "qex.store.records"
    with pytest.raises(AttributeError):
        records.NoSuchThing  # noqa: B018


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
