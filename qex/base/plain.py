"""Small record classes that cost nothing to define.

attrs builds every class it decorates by generating and compiling methods
(0.1-0.5 ms a class, on top of ~15 ms to import attrs and what it imports),
and every command pays for each class its modules define, used or not. The
modules on the submit path declare their small records with ``Plain``
instead: annotated fields with defaults, as for attrs, and the class gets a
keyword or positional ``__init__``, ``__eq__``, ``__repr__``, ``evolve`` and,
with ``frozen=True``, immutability and a hash. Nothing is generated or
compiled. There are no validators or converters: each class checks its values
where they are made (``qex.config.parse`` does, key by key).

    class Hit(Plain):
        id: str
        tags: list = Factory(list)

    class Peer(Plain, frozen=True):
        ...

Assigning or deleting an attribute of a frozen record raises
``FrozenInstanceError`` (an ``AttributeError``).

Where speed counts (the admission's values, ``qex/admit/model.py``: a pass
over 10,000 queued jobs makes one ``Wait`` each), a class may say
``slots=True``: its fields become its ``__slots__`` (no ``__dict__``: less
memory, faster reads), so it keeps nothing besides its fields. Any
record may write its own ``__init__``; one whose parameters are the fields, in
order, is a fast positional constructor: it writes no defaults (Plain gives it
the fields', which stay declared once, on the fields, and refuses a
``Factory``, whose default would be shared) and sets the fields with
``setter``, past the frozen guard. Equality, hash, repr, ``evolve``,
``asdict``, pickling and the frozen error are Plain's, whichever ``__init__``
(a class may still write ``__eq__`` and ``__hash__`` where a profile asks, with
Plain's meaning: ``Claim``, in the admission's memo key). Plain's ``__init__``
makes a ``Wait`` in ~0.9 us, the hand-written one in ~0.3: a pass over 10,000
queued jobs takes ~6 ms with the latter, ~13 with the former
(``bench/admit_micro.py``).

    class Wait(Plain, frozen=True, slots=True):
        id: str
        front: str | None = None

        def __init__(self, id: str, front: str | None):  # (defaults: the fields')
            put = setter(self)
            put("id", id)
            put("front", front)
"""

from __future__ import annotations

from operator import attrgetter

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import Self


class Factory:
    """A default made afresh for each instance (a list, a dict)."""

    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


_MISSING = object()

setter = object.__setattr__.__get__  # setter(record)(name, value) sets a field past the frozen guard


class FrozenInstanceError(AttributeError):
    """A field of a frozen record was assigned or deleted."""


def _own_fields(namespace: dict) -> tuple[str, ...]:
    return tuple(n for n in namespace.get("__annotations__", {}) if not n.startswith("_"))


class _Declared(type):
    """Plain's metaclass: it reads the fields and their defaults from the class
    body and writes what a record class needs into it before the class is made
    (setting attributes on a made class costs more; and a slot cannot share its
    name with a class attribute, so a default cannot stay in the class body)."""

    def __new__(mcls, name: str, bases: tuple, ns: dict, frozen: bool = False, slots: bool = False, **kw):
        base = next((b for b in bases if isinstance(b, _Declared)), None)
        if base is None:  # (Plain itself)
            return super().__new__(mcls, name, bases, ns, **kw)
        own = _own_fields(ns)
        defaults = dict(base._defaults)
        for field in own:
            if field in ns:
                defaults[field] = ns.pop(field)  # the instance holds it; a Factory must not show through
            elif defaults:
                raise TypeError(f"{name}.{field}: a field without a default follows one with a default")
        fields = base._fields + tuple(n for n in own if n not in base._fields)
        frozen = frozen or base._frozen
        ns.update(_fields=fields, _defaults=defaults, _frozen=frozen, _key=_one_key(fields))
        ns["_slots"] = slots and all(b.__dictoffset__ == 0 for b in bases)
        if slots:
            ns["__slots__"] = own
            ns.setdefault("__reduce__", Plain._reduce)
        if ns.get("__hash__") is None:
            ns["__hash__"] = Plain._hash if frozen else None
        _fast_init(name, ns, base, own)
        return super().__new__(mcls, name, bases, ns, **kw)


class Plain(metaclass=_Declared):
    """Base of the small records (see the module's docstring)."""

    __slots__ = ()  # (a subclass without slots=True has a __dict__)
    _fields: tuple[str, ...] = ()
    _defaults: dict = {}
    _frozen = False
    _slots = False

    def __init__(self, *args, **kwargs):
        fields, cls = self._fields, type(self)
        if len(args) > len(fields):
            raise TypeError(f"{cls.__name__}() takes {len(fields)} arguments, {len(args)} given")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            values[name] = value
        put = object.__setattr__
        for name in fields:
            value = values.get(name, _MISSING)
            if value is _MISSING:
                value = self._defaults.get(name, _MISSING)
                if value is _MISSING:
                    raise TypeError(f"{cls.__name__}() missing required argument: {name!r}")
                if isinstance(value, Factory):
                    value = value.make()
            put(self, name, value)

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return cls._fields

    def _values(self) -> tuple:
        return tuple(getattr(self, n) for n in self._fields)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return self._key(self) == other._key(other)

    def _hash(self) -> int:
        return hash((type(self).__name__, self._key(self)))

    def _reduce(self) -> tuple:  # (slots=True: pickle and copy go through __init__, not past the frozen guard)
        return type(self), self._values()

    def __setattr__(self, name, value):
        if self._frozen:
            raise FrozenInstanceError(f"{type(self).__name__}.{name} cannot be assigned: make a new one with evolve()")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self._frozen:
            raise FrozenInstanceError(f"{type(self).__name__}.{name} cannot be deleted")
        object.__delattr__(self, name)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._fields)
        return f"{type(self).__name__}({inner})"

    def evolve(self, **changes: object) -> Self:
        """A copy with ``changes`` (what ``attrs.evolve`` does); what the record keeps
        besides its fields (``qex.store.records.load``: a newer qex's keys) stays."""
        for name in changes:
            if name not in self._fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
        cls = type(self)
        if cls.__init__ is not Plain.__init__ or cls._slots:  # (its own __init__ checks the values; no __dict__)
            return cls(**{**{n: getattr(self, n) for n in self._fields}, **changes})
        made = object.__new__(cls)
        object.__setattr__(made, "__dict__", {**self.__dict__, **changes})
        return made

    def asdict(self, shallow: bool = False) -> dict:
        """The fields, and what the record keeps besides them (``evolve``), as a dict;
        unless ``shallow``, nested records become dicts and tuples lists (the JSON
        shape, as ``attrs.asdict`` gives)."""
        kept = {n: getattr(self, n) for n in self._fields} if self._slots else self.__dict__
        if shallow:
            return dict(kept)
        return {n: json_value(v) for n, v in kept.items()}


def _no_key(record: Plain) -> tuple:
    return ()


def _one_key(fields: tuple[str, ...]):
    return attrgetter(*fields) if fields else _no_key


def _fast_init(name: str, ns: dict, base: type, own: tuple[str, ...]) -> None:
    """A fast ``__init__`` (its parameters: the fields, in order) gets the fields'
    defaults; a class that adds fields writes its own if it inherits one."""
    init, fields, defaults = ns.get("__init__"), ns["_fields"], ns["_defaults"]
    if init is None:
        if own and base.__init__ is not Plain.__init__:
            raise TypeError(f"{name}: adds fields to a class with its own __init__: write one")
        return
    code = init.__code__
    if code.co_varnames[1 : code.co_argcount] != fields or code.co_flags & 0x0C:  # (0x0C: *args, **kw)
        return  # (not a fast __init__: a converter, as qex.config.keys.Percent; it calls Plain's)
    if init.__defaults__ or init.__kwdefaults__:
        raise TypeError(f"{name}.__init__: declare the defaults on the fields, not in __init__")
    tail = tuple(defaults[n] for n in fields[len(fields) - len(defaults) :])
    if any(isinstance(d, Factory) for d in tail):
        raise TypeError(f"{name}: a Factory default needs Plain's __init__")
    init.__defaults__ = tail or None


_SCALARS = frozenset({str, int, float, bool, type(None)})


def json_value(value: object) -> object:
    """``value`` as JSON values: a record a dict, a tuple a list, at any depth."""
    kind = type(value)
    if kind in _SCALARS:  # (most values: a fan-out turns a thousand environments into dicts)
        return value
    if kind is dict:
        return {k: v if type(v) in _SCALARS else json_value(v) for k, v in value.items()}
    if isinstance(value, Plain):
        return value.asdict()
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    if isinstance(value, dict):
        return {k: json_value(v) for k, v in value.items()}
    return value
