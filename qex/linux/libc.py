"""A function of the C library that the ``os`` module lacks (``prctl``, ``tee``, ``syscall``),
bound through ``_ctypes``, the C module under ctypes: importing ctypes itself cost a just-forked
supervisor 4-10 ms before its job's first instruction, this 1-1.5 ms. Nothing at the top: the
minimal watcher (``qex.supervisor.watch``) imports the modules that use it."""

_TYPES = {"int": "i", "uint": "I", "long": "l", "ulong": "L"}  # (long: ssize_t; ulong: size_t)


def function(name: str, restype: str, argtypes: tuple[str, ...]) -> object:
    """libc's ``name``, its C types given by word (int, uint, long, ulong), recording ``errno``
    for ``errno()``; False where it cannot be bound (no _ctypes, no such function)."""
    try:
        import _ctypes

        types = {word: type(word, (_ctypes._SimpleCData,), {"_type_": code}) for word, code in _TYPES.items()}

        class Function(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = types[restype]

        class Libc:
            _handle = _ctypes.dlopen(None)

        call = Function((name, Libc))
        call.argtypes = tuple(types[word] for word in argtypes)
        return call
    except (ImportError, OSError, AttributeError, TypeError):
        return False


def errno() -> int:
    """The ``errno`` the last call of a bound function left (in this thread)."""
    import _ctypes

    return _ctypes.get_errno()
