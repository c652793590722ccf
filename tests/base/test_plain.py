"""Plain (qex/base/plain.py): a record with slots=True and its own positional
__init__ (the admission's values) behaves as any Plain record: equality, hash,
repr, evolve, asdict, pickling and the one frozen error."""

import copy
import pickle

import pytest

from qex.base.plain import Factory, FrozenInstanceError, Plain, setter


class Fast(Plain, frozen=True, slots=True):
    id: str
    holder: str
    front: str | None = None
    tags: tuple = ()

    def __init__(self, id: str, holder: str, front: str | None, tags: tuple):
        put = setter(self)
        put("id", id)
        put("holder", holder)
        put("front", front)
        put("tags", tags)


class Slotted(Plain, frozen=True, slots=True):  # Plain's own __init__
    id: str
    holder: str
    front: str | None = None
    tags: tuple = ()


class Loose(Plain, frozen=True):  # the same fields, the usual Plain record
    id: str
    holder: str
    front: str | None = None
    tags: tuple = ()


@pytest.mark.parametrize("cls", [Fast, Slotted, Loose])
def test_every_kind_of_record_builds_compares_hashes_prints_and_evolves_alike(cls):
    a = cls("j1", "own")
    assert (a.id, a.holder, a.front, a.tags) == ("j1", "own", None, ())  # the fields' defaults
    assert a == cls(id="j1", holder="own") == cls("j1", "own", None, ()) and a != cls("j1", "peer")
    assert hash(a) == hash(cls("j1", "own")) and len({a, cls("j1", "own", None)}) == 1
    assert repr(cls("j1", "own", "j0", (1,))) == f"{cls.__name__}(id='j1', holder='own', front='j0', tags=(1,))"
    moved = a.evolve(front="j0")
    assert (moved.id, moved.front, a.front) == ("j1", "j0", None) and type(moved) is cls
    assert cls("j1", "own", tags=((1, 2),)).asdict() == {"id": "j1", "holder": "own", "front": None, "tags": [[1, 2]]}
    assert cls.field_names() == ("id", "holder", "front", "tags")
    with pytest.raises(TypeError, match="bogus"):
        a.evolve(bogus=1)


@pytest.mark.parametrize("cls", [Fast, Slotted, Loose])
def test_every_frozen_record_refuses_assignment_and_deletion_with_the_one_frozen_error(cls):
    a = cls("j1", "own")
    for change in (lambda: setattr(a, "id", "x"), lambda: delattr(a, "holder"), lambda: setattr(a, "new", 1)):
        with pytest.raises(FrozenInstanceError, match=f"{cls.__name__}\\."):
            change()
    assert issubclass(FrozenInstanceError, AttributeError) and (a.id, a.holder) == ("j1", "own")


@pytest.mark.parametrize("cls", [Fast, Slotted, Loose])
def test_a_record_survives_pickle_and_copy(cls):
    a = cls("j1", "own", "j0", (1, 2))
    for again in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a), copy.copy(a)):
        assert again == a and type(again) is cls


def test_a_slotted_record_keeps_nothing_besides_its_fields():
    for a in (Fast("j1", "own"), Slotted("j1", "own")):
        assert not hasattr(a, "__dict__")
    assert hasattr(Loose("j1", "own"), "__dict__")
    assert Fast.__init__.__defaults__ == (None, ())  # declared once: the fields' defaults


def test_a_slotted_record_that_is_not_frozen_may_be_assigned():
    class Open(Plain, slots=True):
        n: int = 0

    a = Open()
    a.n = 3
    assert a == Open(3) and not hasattr(a, "__dict__")
    with pytest.raises(TypeError):
        hash(a)


def test_a_default_written_in_a_fast_init_instead_of_on_the_field_is_refused():
    with pytest.raises(TypeError, match="declare the defaults on the fields"):

        class Twice(Plain, frozen=True, slots=True):  # noqa: F841
            n: int = 0

            def __init__(self, n: int = 0):
                setter(self)("n", n)


def test_a_factory_default_with_a_fast_init_is_refused():
    with pytest.raises(TypeError, match="Factory"):

        class Shared(Plain, slots=True):  # noqa: F841
            items: list = Factory(list)

            def __init__(self, items: list):
                setter(self)("items", items)


def test_a_subclass_that_adds_fields_to_a_fast_init_must_write_its_own():
    with pytest.raises(TypeError, match="write one"):

        class More(Fast):  # noqa: F841
            extra: int = 0
