"""qex from Python (qex.submit, qex.Job, qex.Executor), end to end: scripts that these
tests write, run by this interpreter against the test's queue, checked also through
the command line. Several checks share one script: each script pays a start-up."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap

from e2e_helpers import read_line, release

import qex

# The scripts import the qex these tests test (and so do their calls' jobs: they get the env).
HERE = os.path.dirname(os.path.dirname(os.path.abspath(qex.__file__)))
CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "100MB"\n[python]\nmax_input = "64KB"\n'


def env_of(q) -> dict:
    """The queue's environment, with this qex first on the path (the scripts', their jobs', the CLI's)."""
    if not q.env.get("PYTHONPATH", "").startswith(HERE + os.pathsep):
        q.env["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, q.env.get("PYTHONPATH")) if p) + os.pathsep
    return q.env


def script(q, name: str, body: str) -> str:
    path = os.path.join(q.root, name)
    with open(path, "w") as fh:
        fh.write(textwrap.dedent(body))
    return path


def python(q, path: str, *args, timeout=60) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, path, *map(str, args)],
        capture_output=True,
        text=True,
        env=env_of(q),
        cwd=q.root,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def lines(proc) -> dict:
    """The script's ``KEY VALUE`` lines (VALUE as JSON)."""
    return {k: json.loads(v) for k, _, v in (line.partition(" ") for line in proc.stdout.splitlines())}


def status(q, job_id: str) -> dict:
    proc = q.run("status", "--json", job_id, check=0)
    return json.loads(proc.stdout)[0]


def test_a_shell_job_from_python_is_seen_by_the_command_line_and_attached_from_another_process(q):
    q.write_config(CONFIG)
    env_of(q)
    gate = q.gate("attach")
    path = script(
        q,
        "jobs.py",
        f"""
        import json, qex
        j = qex.submit(["sh", "-c", "echo out; exit 3"], name="py-shell", cpu=1, tags=["t1"])
        print("shell", json.dumps([j.id, j.wait(), j.state, j.logs()]))
        g = qex.submit("while [ ! -e {gate} ]; do sleep 0.02; done; echo released", name="gated")
        print("gated", json.dumps(g.id))
        try:
            qex.submit(["true"], cpu="lots")
        except qex.QexError as exc:
            print("refused", json.dumps([type(exc).__name__, str(exc), exc.code]))
        try:
            qex.Job("no-such-job-here")
        except qex.QexError as exc:
            print("missing", json.dumps(exc.code))
        other = qex.Queue(state_dir="{q.root}/other", config="{q.config}")
        o = other.submit(["true"], name="elsewhere")
        print("other", json.dumps([o.id, o.wait()]))
    """,
    )
    got = lines(python(q, path))
    shell_id, code, state, out = got["shell"]
    assert (code, state, out) == (3, "failed", "out\n")
    rec = status(q, shell_id)
    assert rec["name"] == "py-shell" and rec["exit_code"] == 3 and rec["tags"] == ["t1"]
    assert q.run("wait", shell_id).returncode == 3
    cli = q.run("submit", "--cpu", "lots", "--", "true")  # the command line's sentence and code
    assert got["refused"] == ["SpecError", cli.stderr.strip().removeprefix("qex: "), cli.returncode]
    assert cli.returncode == 121 and got["missing"] == 127
    other_id, other_code = got["other"]  # qex.Queue(state_dir=...): that queue's, not the environment's
    assert other_code == 0 and not os.path.exists(os.path.join(q.state, "jobs", other_id))
    there = q.run("status", "--json", other_id, env={"QEX_STATE_DIR": os.path.join(q.root, "other")}, check=0)
    assert json.loads(there.stdout)[0]["name"] == "elsewhere"

    attach = script(
        q,
        "attach.py",
        """
        import json, sys, qex
        j = qex.Job(sys.argv[1][:8])
        print(j.state, flush=True)
        code = j.wait()
        print(json.dumps([j.id, code, j.state, j.logs(), j.record["name"]]), flush=True)
    """,
    )
    second = subprocess.Popen(
        [sys.executable, attach, got["gated"]],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_of(q),
        cwd=q.root,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert (read_line(second, 30) or "").strip() in ("running", "starting")  # it waits: the job waits on the gate
        release(gate)
        out, err = second.communicate(timeout=30)
    finally:
        second.kill()
    assert json.loads(out) == [got["gated"], 0, "completed", "released\n", "gated"], err


def test_executor_calls_return_raise_travel_and_map_as_one_group(q):
    q.write_config(CONFIG)
    env_of(q)
    path = script(
        q,
        "calls.py",
        """
        import json, qex

        def square(x):
            return x * x

        def fails(word):
            raise ValueError(f"bad word {word}")

        def make_adder(n):
            return lambda x: x + n           # a closure over n

        with qex.Executor(cpu=1) as ex:
            f = ex.submit(square, 7)
            print("square", json.dumps([f.result(), f.job.id]))
            try:
                ex.submit(fails, "w").result()
            except ValueError as exc:
                print("raised", json.dumps([str(exc), exc.__notes__[0]]))
            print("lambda", json.dumps(ex.submit(lambda s: s.upper(), "ok").result()))
            print("closure", json.dumps(ex.submit(make_adder(10), 5).result()))
            futures = []
            print("map", json.dumps(list(ex.map(make_adder(100), range(6)))))
            wide = ex.options(cpu=0.5, mem="50MB", tags=["sweep"], name="wide")
            g = wide.submit(square, 3)
            print("options", json.dumps([g.result(), g.job.id, ex.submit(square, 2).job.id]))
            try:
                ex.submit(square, b"x" * 100_000)
            except qex.QexError as exc:
                print("too_big", json.dumps([str(exc), exc.code]))
    """,
    )
    got = lines(python(q, path))
    assert got["square"][0] == 49
    assert got["raised"][0] == "bad word w"  # its own type and message; the remote traceback as a note
    assert "in fails" in got["raised"][1] and "ValueError: bad word w" in got["raised"][1]
    assert got["lambda"] == "OK" and got["closure"] == 15
    assert got["map"] == [100, 101, 102, 103, 104, 105]
    assert "max_input" in got["too_big"][0] and "64KB" in got["too_big"][0] and got["too_big"][1] == 121

    # the map's calls: one group, seen by qex list --group and qex wait G
    mapped = [r for r in q.records() if r.get("group")]
    assert len(mapped) == 6 and len({r["group"] for r in mapped}) == 1
    group = mapped[0]["group"]
    assert [r["name"] for r in mapped] == [f"lambda-{i:03d}" for i in range(1, 7)]
    listed = json.loads(q.run("list", "--group", group[:8], "--json", check=0).stdout)
    assert sorted(r["id"] for r in listed) == sorted(r["id"] for r in mapped)
    assert q.run("wait", group[:8]).returncode == 0

    value, wide_id, plain_id = got["options"]
    wide, plain = status(q, wide_id), status(q, plain_id)
    assert value == 9 and wide["name"] == "wide" and wide["tags"] == ["sweep"]
    assert wide["claims"]["cpu"] == 0.5 and wide["claims"]["mem"] == 50 * 1024**2
    assert plain["claims"]["cpu"] == 1 and plain["name"] == "square" and plain["tags"] == []  # ex as it was
    assert status(q, got["square"][1])["command"][:3] == [sys.executable, "-m", "qex.api.runner"]


def test_calls_keep_the_budget_cancel_and_kill(q):
    """Two cpu=2 calls on a 2-core budget never overlap; cancel() of a queued call
    cancels its job; a killed call raises JobFailed with its state; Ctrl-C in
    result() stops the wait only."""
    q.write_config(CONFIG)
    env_of(q)
    path = script(
        q,
        "budget.py",
        """
        import json, os, sys, time, qex
        root = sys.argv[1]

        def held(tag):                       # writes its start, waits for the gate, writes its end
            with open(os.path.join(root, tag + ".start"), "w") as fh:
                fh.write(repr(time.time()))
            deadline = time.monotonic() + 30
            while not os.path.exists(os.path.join(root, "gate-" + tag)) and time.monotonic() < deadline:
                time.sleep(0.01)
            with open(os.path.join(root, tag + ".end"), "w") as fh:
                fh.write(repr(time.time()))
            return tag

        ex = qex.Executor(cpu=2)
        a, b = ex.submit(held, "a"), ex.submit(held, "b")
        while not os.path.exists(os.path.join(root, "a.start")):
            time.sleep(0.01)
        print("while_a", json.dumps([b.job.state, b.running(), a.running(), a.cancel()]), flush=True)
        c = ex.submit(held, "c")
        print("cancel", json.dumps([c.cancel(), c.cancelled(), c.job.state]), flush=True)
        open(os.path.join(root, "gate-a"), "w").close()
        open(os.path.join(root, "gate-b"), "w").close()
        print("results", json.dumps([a.result(), b.result()]), flush=True)
        k = ex.submit(held, "k")
        while not os.path.exists(os.path.join(root, "k.start")):
            time.sleep(0.01)
        print("killed", json.dumps(k.job.kill()), flush=True)
        try:
            k.result()
        except qex.JobFailed as exc:
            print("failed", json.dumps([exc.state, exc.code, exc.job == k.job.id]), flush=True)
        ex2 = qex.Executor(cpu=2)
        x = ex2.submit(held, "x")
        while not os.path.exists(os.path.join(root, "x.start")):
            time.sleep(0.01)
        y = ex2.submit(held, "y")
        ex2.shutdown(wait=False, cancel_futures=True)
        print("shutdown", json.dumps([y.cancelled(), y.job.state, x.done()]), flush=True)
        open(os.path.join(root, "gate-x"), "w").close()
        print("x", json.dumps(x.result()), flush=True)
        w = ex.submit(held, "w")
        print("waiting", json.dumps(w.job.id), flush=True)
        try:
            w.result()
        except KeyboardInterrupt:
            print("interrupted", json.dumps(w.job.state), flush=True)
    """,
    )
    proc = subprocess.Popen(
        [sys.executable, path, q.root],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env_of(q),
        cwd=q.root,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        got = {}
        while "waiting" not in got:
            line = (read_line(proc, 60) or "").strip()
            assert line, proc.stderr.read() if proc.poll() is not None else "no line"
            key, _, value = line.partition(" ")
            got[key] = json.loads(value)
        q.wait_for(lambda: os.path.exists(os.path.join(q.root, "w.start")), 30, "the call w to start")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    got.update(lines(subprocess.CompletedProcess([], 0, out)))
    assert got["while_a"] == ["queued", False, True, False]  # a runs: cancel() leaves it
    assert got["cancel"] == [True, True, "cancelled"]
    assert got["results"] == ["a", "b"]
    starts = {t: float(open(os.path.join(q.root, f"{t}.start")).read()) for t in "ab"}
    ends = {t: float(open(os.path.join(q.root, f"{t}.end")).read()) for t in "ab"}
    assert starts["b"] >= ends["a"], (starts, ends)  # never both at once on 2 cores
    assert not os.path.exists(os.path.join(q.root, "c.start"))
    assert got["shutdown"] == [True, "cancelled", False] and got["x"] == "x"  # cancel_futures: what waits
    assert got["killed"] == "killed" and got["failed"] == ["killed", 125, True]
    # Ctrl-C: the wait stopped, the call runs on, and stderr says how to stop it
    assert got["interrupted"] in ("starting", "running")  # (its supervisor records 'running' just after the spawn)
    assert f"qex kill {got['waiting'][:8]}" in err
    assert status(q, got["waiting"])["state"] == "running"
    release(q.gate("w"))
    assert q.run("wait", got["waiting"]).returncode == 0


def test_import_qex_loads_none_of_the_api():
    code = (
        "import sys, qex; loaded = sorted(m for m in sys.modules if m.startswith('qex.') or m == 'cloudpickle'); "
        "print(loaded); qex.Executor; print('qex.api.executor' in sys.modules, 'cloudpickle' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert proc.stdout.splitlines() == ["[]", "True False"]  # (cloudpickle: at the first call)


def test_no_supervisor_or_waker_is_a_fork_of_the_calling_program_and_a_call_reruns(q):
    """A program with a second thread holding a lock, and a marker mapping: the supervisors of its
    jobs (a call and a shell job) and the waker come from a fresh qex process, so no process but
    the program maps the marker (a fork would: its maps are the program's)."""
    q.write_config(CONFIG)
    env_of(q)["QEX_WATCH_GRACE"] = "60"  # (a supervisor keeps the image it was forked with meanwhile)
    path = script(
        q,
        "nofork.py",
        """
        import json, mmap, os, sys, threading, time, qex
        root, MARK = sys.argv[1], "qex-test-caller-marker"
        fd = os.memfd_create(MARK)
        os.ftruncate(fd, 1 << 20)
        marker = mmap.mmap(fd, 1 << 20)
        marker[:4] = b"mark"
        lock, ready, stop = threading.Lock(), threading.Event(), threading.Event()

        def holder():
            with lock:
                ready.set()
                stop.wait()

        threading.Thread(target=holder, daemon=True).start()
        ready.wait()

        def marked():
            out = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/maps") as fh:
                        if int(pid) != os.getpid() and MARK in fh.read():
                            out.append(int(pid))
                except OSError:
                    pass
            return out

        def gated(tag):
            print("ran", tag)
            open(os.path.join(root, tag + ".start"), "w").close()
            while not os.path.exists(os.path.join(root, "gate-" + tag)):
                time.sleep(0.01)
            return os.getppid()

        f = qex.Executor(cpu=1).submit(gated, "m")
        j = qex.submit(f"touch {root}/s.start; while [ ! -e {root}/gate-s ]; do sleep 0.02; done", cpu=1)
        while not all(os.path.exists(os.path.join(root, t + ".start")) for t in "ms"):
            time.sleep(0.01)
        while not all(sups := [f.job.record.get("supervisor_pid"), j.record.get("supervisor_pid")]):
            time.sleep(0.01)  # (recorded just after the spawn)
        print("supervisors", json.dumps([os.path.exists(f"/proc/{p}/maps") for p in sups]), flush=True)
        print("marked", json.dumps(marked()), flush=True)
        print("lock", json.dumps(lock.locked()), flush=True)
        for t in "ms":
            open(os.path.join(root, "gate-" + t), "w").close()
        print("call", json.dumps([f.job.id, f.result() == sups[0]]), flush=True)
        print("shell", json.dumps(j.wait()), flush=True)
    """,
    )
    got = lines(python(q, path, q.root))
    assert got["supervisors"] == [True, True] and got["lock"] is True  # both alive while it looked
    assert got["marked"] == []
    call_id, same = got["call"]
    assert same is True and got["shell"] == 0
    # qex rerun of the call runs it again: the call's file goes with it (layout.RUN_FILES)
    again = q.run("rerun", call_id, check=0).stdout.split()[0]
    assert again != call_id and q.run("wait", again).returncode == 0
    with open(os.path.join(q.state, "jobs", again, "result.pickle"), "rb") as fh:
        result = pickle.load(fh)
    assert result["ok"] and isinstance(pickle.loads(result["value"]), int)  # (its supervisor's pid)
    with open(os.path.join(q.state, "jobs", again, "stdout.log")) as fh:
        assert fh.read() == "ran m\n"
