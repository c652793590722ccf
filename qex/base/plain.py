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
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from typing import Self


class Factory:
    """A default made afresh for each instance (a list, a dict)."""

    __slots__ = ("make",)

    def __init__(self, make):
        self.make = make


_MISSING = object()


class Plain:
    """Base of the small records (see the module's docstring)."""

    _fields: tuple[str, ...] = ()
    _defaults: dict = {}
    _frozen = False

    def __init_subclass__(cls, frozen: bool = False, **kw):
        super().__init_subclass__(**kw)
        own = [n for n in cls.__dict__.get("__annotations__", {}) if not n.startswith("_")]
        defaults = dict(cls._defaults)
        for name in own:
            value = cls.__dict__.get(name, _MISSING)
            if value is not _MISSING:
                defaults[name] = value
                delattr(cls, name)  # the instance holds it; a Factory must not show through
            elif defaults:
                raise TypeError(f"{cls.__name__}.{name}: a field without a default follows one with a default")
        cls._fields = cls._fields + tuple(n for n in own if n not in cls._fields)
        cls._defaults = defaults
        cls._frozen = frozen or cls._frozen
        cls.__hash__ = Plain._hash if cls._frozen else None

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
        return self._values() == other._values()

    def _hash(self) -> int:
        return hash((type(self).__name__,) + self._values())

    def __setattr__(self, name, value):
        if self._frozen:
            raise AttributeError(f"{type(self).__name__} is frozen: make a new one with evolve()")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        if self._frozen:
            raise AttributeError(f"{type(self).__name__} is frozen")
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
        if cls.__init__ is not Plain.__init__:  # (its own __init__ checks the values: it makes the copy)
            return cls(**{**{n: getattr(self, n) for n in self._fields}, **changes})
        made = object.__new__(cls)
        object.__setattr__(made, "__dict__", {**self.__dict__, **changes})
        return made

    def asdict(self, shallow: bool = False) -> dict:
        """The fields, and what the record keeps besides them (``evolve``), as a dict;
        unless ``shallow``, nested records become dicts and tuples lists (the JSON
        shape, as ``attrs.asdict`` gives)."""
        if shallow:
            return dict(self.__dict__)
        return {n: json_value(v) for n, v in self.__dict__.items()}


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
