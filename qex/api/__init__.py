"""qex from Python: jobs (``qex.submit``, ``qex.Job``, ``qex.Queue``) and a
``concurrent.futures`` Executor whose calls are qex jobs (``qex.Executor``).

Beside the command line (``qex/cli/``), above every other layer: it builds the
same requests through the same validation (``qex.jobs.request``, ``qex.jobs.submit``),
waits with the same poll (``qex.control.waiting``), stops with the same rule
(``qex.control.actions.stop_jobs``), and raises the command line's refusals with
its exit codes (``qex.base.errors.error_exit_code``). ``import qex`` loads none of
it: ``qex/__init__.py`` resolves its names when first used; ``cloudpickle`` is
imported by ``qex.api.calls`` and the job's side, ``qex.api.runner``, only.
"""
