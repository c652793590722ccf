"""A job spawned behind a gate: forked, it waits on a pipe until the supervisor opens it, then execs.

For a job that goes into a systemd scope (``qex.linux.scope``): systemd can only move a
process that exists, and nothing of the job may run before it is inside. So the
supervisor forks the job's process, which blocks reading the gate; asks for the scope
with its pid; waits until the scope holds it; and then opens the gate (``Gated.open``):
the process sets itself up as ``spawn.Child.spawn`` would have the kernel do it (stdin,
stdout and stderr, its own process group, SIGPIPE and SIGXFSZ at their defaults, an
empty signal mask, the peer lock at ``job_lock_fd()``, a nice) and execs. An exec that
fails is reported back through a close-on-exec pipe, as ``subprocess`` does.
"""

from __future__ import annotations

import _signal as signal
import os


class Gated:
    """The forked job, not yet running anything of its own."""

    def __init__(self, make: type, path: str, argv, env: dict, at: int = -1, lock: int = -1,
                 stdin: int | None = None, nice: int = 0):
        """``make``: ``spawn.Child``; ``lock`` goes to fd ``at`` (``spawn.job_lock_fd``)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        gate_r, self.gate_w = os.pipe()
        self.fail_r, fail_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # (the child: only system calls until the exec or _exit)
            code = 127
            try:
                for fd in (self.gate_w, out_r, err_r, self.fail_r):
                    os.close(fd)
                os.read(gate_r, 1)  # EOF when the supervisor opens the gate (or dies)
                os.setpgid(0, 0)
                if stdin is None:
                    stdin = os.open(os.devnull, os.O_RDONLY)
                os.dup2(stdin, 0)
                os.dup2(out_w, 1)
                os.dup2(err_w, 2)
                if at >= 0:
                    os.dup2(lock, at)
                if nice:
                    os.nice(nice)
                signal.signal(signal.SIGPIPE, signal.SIG_DFL)
                signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_SETMASK, ())
                os.execve(path, list(argv), env)
            except OSError as exc:
                try:
                    os.write(fail_w, f"{exc.errno or 0} {exc.strerror or exc}".encode())
                except OSError:
                    pass
            except BaseException:
                pass
            os._exit(code)
        for fd in (gate_r, out_w, err_w, fail_w):
            os.close(fd)
        try:
            os.setpgid(pid, pid)  # (also in the child: whichever runs first)
        except OSError:
            pass
        self.child = make(pid, open(out_r, "rb", buffering=0), open(err_r, "rb", buffering=0))

    @property
    def pid(self) -> int:
        return self.child.pid

    def open(self):
        """Let it exec; the job, or OSError as the exec failed (the process is reaped then)."""
        os.close(self.gate_w)
        try:
            said = b""
            while True:
                chunk = os.read(self.fail_r, 512)
                if not chunk:
                    break
                said += chunk
        finally:
            os.close(self.fail_r)
        if said:
            self.child.wait()
            self.child.stdout.close()
            self.child.stderr.close()
            number, _, words = said.decode(errors="replace").partition(" ")
            raise OSError(int(number) if number.isdigit() else 0, words)
        return self.child
