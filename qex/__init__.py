"""qex: a daemonless job queue for one shared Linux machine.

``import qex`` loads nothing but this file: the Python API's names (``qex.submit``,
``qex.Job``, ``qex.Queue``, ``qex.Executor``, ``qex.QexError``, ``qex.JobFailed``)
are resolved when first used (``__getattr__``), so that no command pays for them.
"""

_API = {
    "submit": "qex.api.jobs",
    "Job": "qex.api.jobs",
    "Queue": "qex.api.jobs",
    "JobFailed": "qex.api.jobs",
    "Executor": "qex.api.executor",
    "Future": "qex.api.executor",
    "QexError": "qex.base.errors",
}
__all__ = sorted(_API)


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'qex' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_API))
