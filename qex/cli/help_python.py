"""The text of `qex help python` (docs/python.md says more)."""

PYTHON = """\
qex from Python: the same queue, budget, claims and records as the command line.
(docs/python.md has a notebook session.)

Jobs:
  import qex
  job = qex.submit(["./train.sh", "--lr", "0.1"], cpu=4, mem="16GB", gpu=1, vram="20GB", name="train")
  job.id, job.state, job.record        # record: what `qex status --json ID` prints
  job.wait(timeout=None)               # its exit code, as `qex wait` gives it (124: the timeout passed)
  job.logs("stdout"), job.kill(), job.cancel()
  qex.Job("train")                     # attach later, from any process: an id, a prefix or a name
  qex.Queue(state_dir=..., config=...).submit(...)   # another queue than $QEX_STATE_DIR's
  The keywords are qex submit's options (cpu mem gpu vram claims locks name tags needs
  after dedupe_key timeout retries priority env cwd), checked as it checks them; a
  refusal raises qex.QexError (its subclass) with the command line's sentence, and
  .code is qex submit's exit code (121, 127, ...).

Calls (a concurrent.futures.Executor; each call is one job):
  with qex.Executor(cpu=1, mem="2GB") as ex:
      f = ex.submit(fn, *args, **kwargs)   # f.result(), f.job (a qex.Job), f.cancel()
      for y in ex.map(fn, xs): ...         # one group: qex list --group G, qex wait G, qex kill G
      gpu = ex.options(gpu=1, vram="20GB", name="sweep")   # ex stays as it was
  The call travels with cloudpickle (lambdas, closures, __main__ and notebook functions),
  into the job's directory; this interpreter (sys.executable) runs it in this working
  directory and environment; the value comes back the same way. An exception is raised
  again with its own type, the remote traceback as a note; a job that ended killed, oom,
  timeout, cancelled or skipped raises qex.JobFailed (.state, .code, .traceback).
  A call larger than [python] max_input (256MB) pickled is refused: pass a path.
  f.cancel(): True while the call waits (its job ends cancelled), False once it runs.
  Ctrl-C in result(), wait() or map() stops the waiting only: the jobs go on (they outlive
  the program, as every qex job does), and stderr says the qex kill that stops them.
"""
