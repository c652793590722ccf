"""qex top, and qex wait's live line, in a real terminal (tmux): what the screen
shows, that it changes by itself, that k kills, that the terminal is given back
on every way out, and that a pipe, NO_COLOR and TERM=dumb get no live line, no
escape code and no colour (issue 24)."""

import os
import signal

import pytest
from e2e_helpers import gated, open_gate
from tmux_helpers import BARE_CR, COLOUR, Pane, qex_argv, restored

CONFIG = '[budget]\ncpu = 1\nmem = "4GB"\n[defaults]\nmem = "64MB"\n'


@pytest.fixture
def pane(q):
    panes = []

    def make(name="t"):
        p = Pane(q.root, name)
        panes.append(p)
        return p

    yield make
    for p in panes:
        p.close()


def running_and_queued(q):
    q.write_config(CONFIG)
    running = q.submit("--name", "runner", "--", *gated(q, "run"))
    q.wait_state(running, "running")
    queued = q.submit("--name", "waiter", "--", "true")
    q.wait_state(queued, "queued")
    return running, queued


def test_top_shows_the_queue_changes_by_itself_k_kills_and_q_gives_the_terminal_back(q, pane):
    running, queued = running_and_queued(q)
    p = pane()
    p.start(qex_argv("top"), q.env)
    screen = p.wait_screen(lambda s: "waits for 1 core" in _row(s, queued), what="the queued job and its reason")
    assert "running" in _row(screen, running) and "runner" in _row(screen, running), screen
    assert "queued" in _row(screen, queued) and "waiter" in _row(screen, queued), screen
    assert "cores" in screen and "queue" in screen, screen
    late = q.submit("--name", "latecomer", "--", "true")  # no key pressed: the screen shows it within 2 s
    p.wait_screen(lambda s: late[:8] in s, timeout=2.0, what="the job submitted after the first frame")
    p.keys("k")  # the first row is selected: the running job
    p.wait_screen(lambda s: f"kill {running[:8]}" in s, what="the question")
    p.keys("y")
    assert q.wait_state(running, "killed")["state"] == "killed"
    q.wait_state(queued, "completed")  # (what the kill freed went on)
    p.wait_screen(
        lambda s: any(line.startswith(running[:8]) and "killed" in line for line in s.splitlines()),
        what="the killed job among the ended",
    )
    p.keys("q")
    assert p.exit_code() == 0
    assert restored(p.stty()), p.stty()
    assert p.display("#{alternate_on} #{cursor_flag}") == "0 1"  # the main screen, the cursor shown


@pytest.mark.parametrize("how", ["ctrl-c", "sigterm", "sighup"])
def test_top_gives_the_terminal_back_however_it_is_ended(q, pane, how):
    running, _queued = running_and_queued(q)
    p = pane()
    p.start(qex_argv("top"), q.env)
    p.wait_screen(lambda s: running[:8] in s, what="the first frame")
    pid = p.pid()
    if how == "ctrl-c":
        p.keys("C-c")
        assert p.exit_code() == 0
    elif how == "sigterm":
        os.kill(pid, signal.SIGTERM)
        assert p.exit_code() == 128 + signal.SIGTERM
    else:  # the terminal closes: tmux hangs up its pane
        p.tm("kill-pane", "-t", p.name)
        q.wait_for(
            lambda: not os.path.exists(f"/proc/{pid}") or _zombie(pid),
            timeout=10,
            what="qex top to leave when its terminal is gone",
        )
        return
    assert restored(p.stty()), p.stty()
    assert p.display("#{alternate_on} #{cursor_flag}") == "0 1"
    assert q.record(running)["state"] == "running"  # leaving the view stops nothing


def _row(screen: str, job: str) -> str:
    return next((line for line in screen.splitlines() if line.startswith(job[:8])), "")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return ") Z" in fh.read()
    except OSError:
        return True


def test_top_once_and_top_on_a_pipe_print_one_plain_frame(q):
    running, queued = running_and_queued(q)
    for argv in (("top", "--once"), ("top",)):
        proc = q.run(*argv, check=0)
        assert "\x1b" not in proc.stdout and "\r" not in proc.stdout, proc.stdout
        lines = proc.stdout.splitlines()
        assert any(line.startswith(running[:8]) and "running" in line for line in lines), proc.stdout
        assert any(line.startswith(queued[:8]) and "queued" in line for line in lines), proc.stdout
    assert "one plain frame" in proc.stderr  # (without --once, on a pipe: it says why)
    assert q.record(running)["state"] == "running"


def group_of(q, n: int, gate: str) -> str:
    lines = os.path.join(q.root, f"lines-{gate}")
    with open(lines, "w") as fh:
        fh.write("".join(f"{i}\n" for i in range(n)))
    proc = q.run("submit", "--each-line", lines, "--cpu", "1", "--", *gated(q, gate), "job", "{}", check=0)
    return proc.stdout.strip()


def test_a_group_wait_shows_a_live_line_on_a_terminal_and_nothing_on_a_pipe(q, pane):
    q.write_config(CONFIG.replace("cpu = 1", "cpu = 2"))
    group = group_of(q, 3, "tty")
    p = pane()
    p.start(qex_argv("wait", group), q.env)
    p.wait_screen(lambda s: "0/3 ended, 2 running, 1 waiting" in s, what="the live line")
    open_gate(q, "tty")
    assert p.exit_code() == 0
    screen = p.screen()
    assert "ended," not in screen, screen  # the line is erased: only the records' lines are left
    assert screen.count(" completed  exit 0") == 3, screen
    raw = p.raw()
    assert BARE_CR.search(raw) and b"\x1b[K" in raw, raw
    # the same wait on a pipe: only what it printed before, no \r, no escape code
    piped = group_of(q, 3, "pipe")
    proc = q.popen("wait", piped)
    q.wait_for(lambda: sum(r["state"] == "running" for r in q.records()) == 2, what="two jobs running")
    open_gate(q, "pipe")
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0 and stderr == "", (proc.returncode, stderr)
    assert "\r" not in stdout and "\x1b" not in stdout and stdout.count(" completed  exit 0") == 3, stdout


def test_no_colour_and_no_live_line_where_they_are_not_wanted(q, pane):
    """Colour on a terminal (the state column of qex list); none with NO_COLOR, none
    with TERM=dumb; TERM=dumb gets no live line and qex top's plain frame."""
    q.write_config(CONFIG)
    done = q.submit("--name", "done", "--", "true")
    q.wait_state(done, "completed")
    coloured = pane("colour")
    coloured.start(qex_argv("list"), q.env)
    assert coloured.exit_code() == 0
    assert COLOUR.search(coloured.raw().decode()), coloured.raw()
    for name, extra in (("nocolor", {"NO_COLOR": "1"}), ("dumb", {"TERM": "dumb"})):
        plain = pane(name)
        plain.start(qex_argv("list"), {**q.env, **extra})
        assert plain.exit_code() == 0
        assert b"\x1b" not in plain.raw() and done[:8].encode() in plain.raw(), plain.raw()
    group = group_of(q, 2, "dumb")
    dumb = pane("dumbwait")
    dumb.start(qex_argv("wait", group), {**q.env, "TERM": "dumb"})
    q.wait_for(lambda: any(r["state"] == "running" for r in q.records()), what="a job running")
    open_gate(q, "dumb")
    assert dumb.exit_code() == 0
    assert not BARE_CR.search(dumb.raw()) and b"\x1b" not in dumb.raw(), dumb.raw()
    top = pane("dumbtop")
    top.start(qex_argv("top"), {**q.env, "TERM": "dumb"})
    assert top.exit_code() == 0
    assert b"\x1b" not in top.raw() and done[:8].encode() in top.raw(), top.raw()
    quiet = pane("nocolortop")
    quiet.start(qex_argv("top"), {**q.env, "NO_COLOR": "1"})
    quiet.wait_screen(lambda s: done[:8] in s, what="the first frame")
    assert not COLOUR.search(quiet.screen(escapes=True)), quiet.screen(escapes=True)
    quiet.keys("q")
    assert quiet.exit_code() == 0


def test_top_reads_while_another_process_holds_the_state_lock(q):
    """It takes no lock: a frame comes while the queue's lock is held (a pass would wait)."""
    import fcntl

    running, queued = running_and_queued(q)
    fd = os.open(os.path.join(q.state, "lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        proc = q.run("top", "--once", env={"QEX_LOCK_TIMEOUT": "1"}, timeout=20)
        assert proc.returncode == 0 and "waiting for" not in proc.stderr, proc.stderr
        assert _row(proc.stdout, running) and "waits for 1 core" in _row(proc.stdout, queued), proc.stdout
    finally:
        os.close(fd)


def test_top_in_a_shared_directory_shows_the_other_members_jobs_too(users):
    """Two real users in one shared state directory: the one's qex top shows the
    other's running and queued jobs, with whose they are."""
    from multiuser_helpers import World, gated, open_gate

    w = World(users, users.base, CONFIG)
    shared = os.path.join(w.dir, "lab-queue")
    one, two = w.actor(0, shared), w.actor(1, shared)
    one.run("init", "--shared", shared, "--group", users.group, check=0)
    try:
        running = one.submit("--name", "ones-run", "--", *gated(w.gate("r")))
        one.wait_state(running, "running")
        queued = one.submit("--name", "ones-wait", "--", "true")
        one.wait_state(queued, "queued")
        frame = two.run("top", "--once", check=0).stdout
        assert _row(frame, running).split()[1:3] == [one.user[:10], "running"], frame
        assert _row(frame, queued).split()[1:3] == [one.user[:10], "queued"], frame
        assert any(line.split()[:3] == ["ID", "USER", "STATE"] for line in frame.splitlines()), frame
    finally:
        open_gate(w.gate("r"))
        w.close()
