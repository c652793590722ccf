"""A GPU job's VRAM, sampled by its supervisor (issue 32).

Where the driver answers, the supervisor of a job that claims the pool
``gpu`` reads the VRAM each process holds (``qex.base.gpu_use``: NVML, or
nvidia-smi started and read without blocking) about 1 s after the start, then
every ``[gpu] sample_every``, in its watch loop (``qex.supervisor.watch.loop``
calls ``tick``, polls ``fds`` and ``feed``s them). The job's processes are the
ones ``qex.linux.whose`` says are its own (its environment or its cgroup
names it, or their ancestry reaches this supervisor), whatever device they
use. For each device it keeps the peak of their sum; the record gets
``usage.vram_peak`` (the largest on one device) and
``usage.vram_peak_by_device`` ({device: bytes}: qex's number of a device of
the pool, or the UUID of a GPU the pool does not declare).

While the job runs:

- a peak that grows is written to ``jobs/<id>/vram`` (``layout.VRAM``, a few
  lines of text), which ``qex status`` and ``qex list`` read beside the record;
- the first sample above what the job was given on a device (its ``--vram``,
  or a device it was not given at all) is recorded at once, through a full qex
  started for it (``qex.supervisor.vram_note``): the record's ``vram_over``
  says it in words, and the event stream has it (change "vram").

A reading kept in the state directory less than half a ``sample_every`` ago
(another job's sampler, a pass) is used instead of the driver: several GPU
jobs read it once between them. Each reading this sampler makes is kept there
too (``gpu_use.keep``), for the passes.

Builtin modules only (``posix``, ``time``, ``sys``, ``marshal``): the minimal
watcher runs it. NVML is imported only where the full supervisor found it
(``nvml_path``), and only here and in ``qex.base.gpus_nvml``.
"""

import marshal
import posix
import select
import sys
import time

from qex.base import gpu_files, gpu_use
from qex.linux.whose import whose

FIRST = 1.0  # seconds after the start of the first sample
NOTE_TAG = "qex-vram-note"


class Sampler:
    """The sampler of one attempt of one job (see the module's doc). Its state
    travels across the watcher's execs as a dict (``state``, ``resume``)."""

    FIELDS = (
        "job_id",
        "attempt",
        "root",
        "live",
        "seen_path",
        "mode",
        "every",
        "next_at",
        "ids",
        "claims",
        "peaks",
        "indices",
        "over",
        "noted",
        "env",
        "nvml_path",
        "note_argv",
        "supervisor",
        "samples",
        "note_pid",
    )

    __slots__ = FIELDS + ("reader", "boot")

    def __init__(self, **state):
        for name in self.FIELDS:
            setattr(self, name, state.get(name))
        self.peaks = dict(self.peaks or {})
        self.indices = dict(self.indices or {})
        self.samples = self.samples or 0
        self.reader, self.boot = None, gpu_files.boot_id()

    def state(self) -> dict:
        """What the next process image needs (marshal: builtin types only)."""
        if self.reader is not None:  # an exec ends it: its reading is let go
            self.reader.result()
            self.reader = None
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def resume(cls, state: dict | None) -> "Sampler | None":
        if not state:
            return None
        sampler = cls(**state)
        sampler.supervisor = posix.getpid()
        return sampler

    # ---- the watch loop's side -------------------------------------------------------

    def wake_at(self) -> float | None:
        """When the loop must look again: the next sample, or a reading's deadline."""
        if self.reader is not None:
            if not self.reader.fds():  # all its output in: it ends a moment later (to be reaped)
                return time.time() + 0.005
            return time.time() + max(0.0, self.reader.deadline - time.monotonic())
        return self.next_at

    def fds(self) -> list[int]:
        return self.reader.fds() if self.reader is not None else []

    def tick(self, now: float, poll: object) -> float | None:
        """Take a reading in when it is done (or late); start one when one is due.
        Returns when to look again (``wake_at``)."""
        self._collect(now, poll)
        if self.reader is None and self.next_at is not None and now >= self.next_at:
            self.next_at = now + self.every
            self._reap_note()
            kept = gpu_files.load(self.seen_path, self.boot)
            if kept is not None and self.indices and 0 <= now - kept.at <= self.every / 2:
                self.take(kept, now, kept=True)  # another sampler (or a pass) read it a moment ago
            else:
                self.start_reading(now, poll)
        return self.wake_at()

    def _collect(self, now: float, poll: object) -> None:
        if self.reader is not None and (self.reader.done() or self.reader.late()):
            for fd in self.reader.fds():
                poll.unregister(fd)
            seen, self.reader = self.reader.result(), None
            self.take(seen, now, kept=False)

    def start_reading(self, now: float, poll: object) -> None:
        indices = not self.indices
        if self.nvml_path is not None:
            if self.nvml_path and self.nvml_path not in sys.path:
                sys.path.insert(0, self.nvml_path)
            seen = gpu_use.nvml(indices)
            if seen is not None:
                self.take(seen, now, kept=False)
                return
            self.nvml_path = None  # (NVML does not load here: nvidia-smi from now on)
        program = gpu_use.which("nvidia-smi", self.env.get("PATH", ""))
        if program is None:
            return
        try:
            self.reader = gpu_use.Reader(program, self.env, indices)
        except OSError:
            return
        for fd in self.reader.fds():
            poll.register(fd, select.POLLIN)

    def feed(self, fd: int, poll: object) -> bool:
        """Read what a reading has written on ``fd``; False: not one of its fds."""
        if self.reader is None or fd not in self.reader.fds():
            return False
        self.reader.feed(fd)
        if fd not in self.reader.fds():
            poll.unregister(fd)
            self._collect(time.time(), poll)  # (done already, if it has exited)
        return True

    def stop(self) -> None:
        """The job has ended (the loop is over): no more readings; one under way is let go."""
        self.next_at = None
        if self.reader is not None:
            self.reader.result()
            self.reader = None
        self._reap_note()

    # ---- what a reading says ---------------------------------------------------------

    def take(self, seen: "gpu_use.Seen", now: float, kept: bool) -> None:
        if seen.error:
            return
        if seen.indices:
            self.indices.update(seen.indices)
        if not kept:
            if not seen.indices:
                seen.indices = dict(self.indices)  # (read once: the passes that use it need them too)
            gpu_files.keep(self.seen_path, seen, self.boot, self.mode)
        mine: dict = {}
        for pid, uuid, nbytes in seen.apps:
            w = whose(pid)
            if w is None:
                continue
            if w.job == self.job_id or (w.job is None and w.supervisor == self.supervisor):
                key = self.device_key(uuid)
                mine[key] = mine.get(key, 0) + nbytes
        self.samples += 1
        grew = False
        for key, nbytes in mine.items():
            if nbytes > self.peaks.get(key, 0):
                self.peaks[key] = nbytes
                grew = True
        if grew:
            self.write_live(now)
        over = self.above_claim()
        if over and over != self.over:
            self.over = over
            if not self.noted:
                self.noted = True
                self.note()

    def device_key(self, uuid: str) -> str:
        """qex's number of the pool's device the GPU is (as text), else its UUID."""
        for place, ref in enumerate(self.ids):
            if ref == uuid or (ref.isdigit() and self.indices.get(uuid) == int(ref)):
                return str(place)
        return uuid

    def above_claim(self) -> list:
        """[[device, peak, claimed], ...] where the peak is above what the job was given."""
        return sorted(
            [key, peak, self.claims.get(key, 0)] for key, peak in self.peaks.items() if peak > self.claims.get(key, 0)
        )

    def result(self) -> dict:
        """What the record gets: ``usage`` fields, and the devices above the claim."""
        if not self.peaks:
            return {"samples": self.samples}
        return {
            "samples": self.samples,
            "vram_peak": max(self.peaks.values()),
            "vram_peak_by_device": dict(sorted(self.peaks.items())),
            "over": self.above_claim(),
        }

    def write_live(self, now: float) -> None:
        gpu_files.write_quietly(self.live, gpu_files.live_text(self.peaks, self.attempt, now), self.mode)

    def note(self) -> None:
        """Record now that the job is above its claim: a full qex records it (the
        state lock, the journal), started and not waited for (reaped later).
        ``note_argv``: its command line but the last word, what it records (hex)."""
        data = marshal.dumps({"root": self.root, "job_id": self.job_id, "attempt": self.attempt, **self.result()})
        try:
            closes = [(posix.POSIX_SPAWN_CLOSE, f) for f in gpu_use.inheritable() if f > 2]
            argv = [*self.note_argv, data.hex()]
            self.note_pid = posix.posix_spawn(
                argv[0],
                argv,
                posix.environ,
                file_actions=[*closes, (posix.POSIX_SPAWN_OPEN, 0, "/dev/null", posix.O_RDONLY, 0)],
                setsid=True,
            )
        except OSError:
            pass

    def _reap_note(self) -> None:
        if self.note_pid:
            try:
                if posix.waitpid(self.note_pid, posix.WNOHANG)[0]:
                    self.note_pid = None
            except ChildProcessError:
                self.note_pid = None
