"""Memory in the supervisor: measure each attempt, attribute an OOM kill, answer it.

``Meter`` measures one attempt: a per-job memory cgroup where the machine
allows it (``qex.linux.cgroup``), or a leaf of a systemd scope on cgroup v2
under systemd (``qex.linux.scope``), else the whole tree sampled from /proc
(``qex.linux.rss``), ``getrusage`` and the machine's ``oom_kill`` counter. The evidence it reports is never more than it has:

- ``cgroup``: the kernel counted an OOM kill in the job's own cgroup during
  the attempt, and the job did not exit 0;
- ``machine-counter``: no cgroup; the job's leader died of SIGKILL that qex did
  not send, while the machine's OOM-kill counter rose. That is strong
  circumstance, not proof, and the record says which it was;
- ``None``: no OOM evidence (or none obtainable).

``settle`` runs in the supervisor's final pass (state lock held): a ``qex kill``
wins over any OOM evidence, an OOM attempt is retried with its memory claim
doubled (capped at the budget and at what an idle machine holds) while
``--oom-retries`` allows, and the learner is taught (a completed attempt's
peak; an OOM attempt's floor). An attempt whose peak stayed under its claim
(``within_claim``) ran out of memory outside the job: the sentence names the
limit (the cgroup qex runs in, or the machine), and a retry keeps the claim.
"""

from __future__ import annotations

import _signal as signal  # the C module (see qex.supervisor.run)
import os

from qex.linux import cgroup

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.records import Status
    from qex.supervisor.working import Outcome


class Meter:
    """The measurement of one attempt of one job."""

    def __init__(self):
        self.cg: cgroup.JobCgroup | None = None
        self.why_not = ""
        self.cg_kills0: int | None = None
        self.machine0: int | None = None
        self.job_dir = ""
        self.inside = False  # this supervisor is in the job's cgroup (between enter and leave)
        self.unit: str | None = None  # the systemd scope made for it (qex.linux.scope)

    def prepare(self, job_dir: str, job_id: str, attempt: int) -> None:
        """Before the spawn: make the cgroup (the pid file names it: ``cgroup.note``), read the counters."""
        self.job_dir = job_dir
        self.cg, self.why_not = cgroup.create(job_id, attempt)
        if self.cg is not None:
            self.cg_kills0 = 0  # a cgroup made a moment ago, that nothing has run in yet
        elif cgroup.scope_candidate():  # cgroup v2 under systemd: a leaf of a systemd scope
            self._plan_scope(job_id, attempt)
        if self.cg is None:  # the machine's counter is the evidence only without a cgroup
            self.machine0 = cgroup.machine_oom_kills()

    def _plan_scope(self, job_id: str, attempt: int) -> None:
        """The attempt's cgroup in a systemd scope (``qex.linux.scope``: an early supervisor
        makes it while its submission commits). Without it, the job is measured from /proc
        (``why_not`` says why, and supervisor.log)."""
        from qex.linux import dbus, scope

        try:
            self.cg = scope.make(scope.unit_name(job_id, attempt), f"qex job {job_id} attempt {attempt}")
        except (OSError, dbus.DBusError) as exc:
            why = f"no systemd scope either: {getattr(exc, 'message', '') or exc}"
            self.why_not = f"{self.why_not}; {why}"
            print(f"qex: {why}; the job's peak is sampled from /proc", flush=True)
            return
        self.unit, self.cg_kills0 = scope.unit_name(job_id, attempt), self.cg.oom_kills() or 0

    def enter(self) -> None:
        """Just before the spawn: move this supervisor into the job's cgroup, so that the
        job is born there. If the kernel refuses, the job is measured without a cgroup."""
        if self.cg is None:
            return
        try:
            self.cg.join()
        except OSError:
            self.cannot_join()
        else:
            self.inside = True

    def leave(self) -> None:
        """Right after the spawn (or its failure): back to the supervisor's own cgroup. If
        that fails, the supervisor's own pages would count as the job's: say so in
        supervisor.log (``discard`` tries again before it removes the cgroup)."""
        if not self.inside:
            return
        try:
            self.cg.leave()
        except OSError as exc:
            print(
                f"qex: this supervisor (pid {os.getpid()}) cannot leave the job's memory cgroup "
                f"{self.cg.path} ({exc.strerror or exc}): its own memory counts as the job's "
                "until it can",
                flush=True,
            )
        else:
            self.inside = False

    def cannot_join(self) -> None:
        """The supervisor could not move into the cgroup for the spawn: measure without it."""
        if self.cg is not None:
            self.why_not = f"the job could not join {self.cg.path}"
            self.discard()
            self.machine0 = cgroup.machine_oom_kills()  # (still before the spawn)

    def discard(self) -> None:
        """Remove the cgroup (a process the job left behind keeps it: the sweep removes it later)."""
        if self.inside:
            self.leave()
        if self.cg is not None:
            # Still inside (said in supervisor.log): no rmdir can succeed; the note stays for the
            # sweep, and the next job's spawn moves this supervisor home (its leave).
            if not self.inside and not self.cg.scoped:  # (a scope's cgroup is systemd's to remove)
                self.cg.remove()
            self.cg, self.inside = None, False

    def end(
        self, rusage: object, wait_status: int, stopped_by_qex: bool, sampled: dict | None = None
    ) -> tuple[dict, str | None]:
        """After the job ended (wait4 done): (usage, OOM evidence). Removes the cgroup
        (emptied first when qex stopped the job; what a job that ended by itself left
        there keeps it, and the sweep removes it once they are gone). Without a cgroup,
        the best peak there is: the /proc sampler's whole tree (``sampled``:
        ``qex.linux.rss``), or getrusage's largest process where that is more."""
        rss = rusage.ru_maxrss * 1024 if rusage is not None else None
        usage = {
            "max_rss": rss,
            "cpu_secs": round(rusage.ru_utime + rusage.ru_stime, 3) if rusage else None,
            "peak_from": "rusage" if rss is not None else None,
            "oom_kills": None,
        }
        if self.cg is None and sampled and sampled.get("peak") and (rss is None or sampled["peak"] >= rss):
            usage.update(max_rss=sampled["peak"], peak_from="proc-sample", sample_period=sampled["period"])
        cg_kills = None
        if self.cg is not None:
            # The cgroup's peak, not getrusage's: a forked child's ru_maxrss includes
            # the supervisor's image before exec (~20MB for `true`), and file pages
            # that others already hold in the page cache, which the job never added.
            peak = self.cg.peak()
            if peak is not None:
                usage["max_rss"], usage["peak_from"] = peak, "cgroup"
            now = self.cg.oom_kills()
            if now is not None and self.cg_kills0 is not None:
                cg_kills = usage["oom_kills"] = max(0, now - self.cg_kills0)  # (a record holds no negative count)
            if now is not None and self.cg.scoped:
                group = cgroup.read_counter(os.path.join(self.cg.path, "memory.events"), "oom_group_kill")
                if group and not cg_kills:
                    cg_kills = usage["oom_kills"] = group
            if stopped_by_qex:  # qex kill, --timeout: what is left in the job's cgroup goes too
                self.cg.kill()
                if not self.cg.scoped:
                    cgroup.remove_dir(self.cg.path, wait=0.5)
            self.discard()
        evidence = None
        clean_exit = os.WIFEXITED(wait_status) and os.WEXITSTATUS(wait_status) == 0
        if not stopped_by_qex and not clean_exit:
            if cg_kills is not None:
                evidence = "cgroup" if cg_kills > 0 else None
            elif (
                self.machine0 is not None and os.WIFSIGNALED(wait_status) and os.WTERMSIG(wait_status) == signal.SIGKILL
            ):
                machine = cgroup.machine_oom_kills()
                evidence = "machine-counter" if machine is not None and machine > self.machine0 else None
        return usage, evidence


# (verb, how). Commas and periods only: `qex list` shows an error in a terminal-safe form.
EVIDENCE_WORDS = {
    "cgroup": ("ran out of memory", "when the kernel killed it, as the OOM count of its cgroup shows"),
    "machine-counter": (
        "was most likely stopped for memory",
        "and died of SIGKILL while the OOM kill count of the machine rose, circumstantial evidence as it had no cgroup",
    ),
}


def peak_words(source: str | None, period: float | None) -> str:
    """Where an attempt's peak comes from (``peak_from``; ``sample_period``), in words
    (`` (...)``; "" where it was not measured)."""
    if source == "cgroup":
        return " (its whole process tree, from its cgroup)"
    if source == "proc-sample":
        return f" (its whole process tree, sampled from /proc every {period or 0:g}s)"
    return " (its largest process, from getrusage)" if source == "rusage" else ""


def _peak_words(outcome: Outcome) -> str:
    usage = outcome.usage
    return peak_words(usage.peak_from, usage.sample_period) if usage is not None else ""


def settle(ctx: Context, current: Status, outcome: Outcome, lessons: list | None = None) -> tuple[Outcome, dict | None]:
    """Decide the end of an attempt in the final pass (lock held).

    Returns the outcome as it is to be recorded (a kill wins over OOM evidence; an
    OOM's sentence) and the fields of an OOM retry (new claims and their source, the
    reason), or None. What the learner should be taught goes into ``lessons``
    (``teach`` them after the pass, outside the state lock); without the list it is
    taught at once.
    """
    if current.kill_requested and outcome.state == "oom":
        outcome = outcome.evolve(
            state="killed",
            oom_evidence=None,
            error="stopped by qex kill, which wins over the OOM evidence it also showed",
        )
    retry = None
    if outcome.state == "oom":
        error, retry = _answer_oom(ctx, current, outcome)
        outcome = outcome.evolve(error=_join(error, outcome.error))
        if retry is not None:
            retry["error"] = outcome.error
    taught = _lessons(ctx, current, outcome)
    if taught:
        if lessons is None:
            teach(ctx, taught)
        else:
            lessons[:] = taught  # the last try of the pass (it may be tried again on a full disk)
    return outcome, retry


def _reached(outcome: Outcome) -> int | None:
    """The attempt's measured peak in bytes, or None."""
    return outcome.usage.max_rss if outcome.usage is not None else None


def within_claim(current: Status, outcome: Outcome) -> bool:
    """Whether an OOM attempt's measured peak stayed under its memory claim: then the
    memory ran out outside the job (the cgroup qex runs in, or the machine), the claim
    was not the cause, and a larger one would not help. An unknown peak is not."""
    claim = current.claims.mem
    reached = _reached(outcome)
    return bool(reached) and claim > 0 and reached < claim


def _ran_out_where(ctx: Context) -> tuple[str, int | None]:
    """Which limit ran out when it was not the job's claim: the smallest memory limit of
    the cgroup qex runs in (or one above it) below the machine's memory, else the
    machine's. (Its words, and the cgroup's limit in bytes or None.)"""
    from qex.base.units import format_size

    found = cgroup.enclosing_limit(ctx.mem_total)
    if found is not None:
        limit, path = found
        return f"the memory limit of the cgroup qex runs in ({format_size(limit)}, {path})", limit
    return (f"the machine's memory ({format_size(ctx.mem_total)})" if ctx.mem_total else "the machine's memory"), None


def _answer_oom(ctx: Context, current: Status, outcome: Outcome) -> tuple[str, dict | None]:
    """The sentence of an OOM attempt (the caller adds the outcome's own words after it)
    and the fields of its retry, or None."""
    from qex.base.units import format_size

    claims = current.claims
    claim = claims.mem
    reached = _reached(outcome)
    attempt = current.attempt
    allowed = current.oom_retries
    used = sum(1 for a in current.attempts if a.state == "oom")
    budget = ctx.budget()[1]
    most = ctx.holdable()[1]  # (an absolute budget may be above what an idle machine holds)
    if most is not None:
        budget = min(budget, most)
    verb, how = EVIDENCE_WORDS.get(outcome.oom_evidence, EVIDENCE_WORDS["cgroup"])
    if within_claim(current, outcome):
        return _answer_outside(ctx, current, outcome, claim, reached, used, allowed, f"attempt {attempt} {verb} {how}")
    head = (
        f"attempt {attempt} {verb}: the claim of {format_size(claim)} was too small. "
        f"It reached {format_size(reached) if reached else 'an unknown peak'}{_peak_words(outcome)} {how}"
    )
    new = min(max(2 * claim, reached or 0), budget)
    if used >= allowed:
        why = "Not retried, --oom-retries 0" if allowed == 0 else f"Not retried, its {allowed} --oom-retries are used"
        return f"{head}. {why}", None
    if new <= claim:
        return (
            f"{head}. Not retried: the claim is already at the budget of "
            f"{format_size(budget)}. Raise budget.mem in the config or make the job smaller"
        ), None
    note = f"{head}. Retry {used + 1} of {allowed} claims {format_size(new)}"
    sources = dict(current.claim_source)
    sources["mem"] = (
        f"doubled after attempt {attempt} ran out of memory, the claim of {format_size(claim)} was too small"
    )
    return note, {
        "claims": claims.evolve(mem=new),
        "claim_source": sources,
        "blocked_reason": f"queued for out-of-memory retry {used + 1} of {allowed} with a claim of {format_size(new)}",
    }


def _answer_outside(
    ctx: Context, current: Status, outcome: Outcome, claim: int, reached: int, used: int, allowed: int, head: str
) -> tuple[str, dict | None]:
    """An OOM kill of a job that stayed within its claim: the sentence names the limit
    that ran out; a retry (if any is left) keeps the same claim and says why, unless
    that limit is a cgroup's that holds no more than the claim (it would run out again)."""
    from qex.base.units import format_size

    where, limit = _ran_out_where(ctx)
    head = (
        f"{head}, but it reached only {format_size(reached)}{_peak_words(outcome)} of its claim of "
        f"{format_size(claim)}: "
        f"the memory ran out outside the job, in {where}, so the claim was not the cause "
        "and a larger one would not help"
    )
    if limit is not None and limit <= claim:
        why = (
            "Not retried: that limit is no larger than the claim, so the same claim would run out again; "
            "raise the cgroup's limit, or run qex outside it"
        )
    elif used >= allowed:
        why = "Not retried, --oom-retries 0" if allowed == 0 else f"Not retried, its {allowed} --oom-retries are used"
    else:
        why = ""
    if why:
        return f"{head}. {why}", None
    note = (
        f"{head}. Retry {used + 1} of {allowed} keeps the claim of {format_size(claim)}, "
        "in case the memory in use outside the job frees"
    )
    return note, {
        "blocked_reason": f"queued for out-of-memory retry {used + 1} of {allowed} at the same claim of "
        f"{format_size(claim)}: the memory ran out outside the job"
    }


def _join(first: str, rest: str | None) -> str:
    return f"{first}. {rest}" if rest else first


def _lessons(ctx: Context, current: Status, outcome: Outcome) -> list[tuple]:
    """What this attempt teaches the learner: (command, template, kind, bytes, name) each:
    its memory (``_lesson``), and a completed GPU job's VRAM peak on one device ("vram")."""
    lesson = _lesson(ctx, current, outcome)
    out = [lesson] if lesson is not None else []
    usage = outcome.usage
    if ctx.config.learn_enabled and outcome.state == "completed" and usage is not None and usage.vram_peak:
        out.append((current.command, current.template, "vram", int(usage.vram_peak), current.name))
    return out


def _lesson(ctx: Context, current: Status, outcome: Outcome) -> tuple | None:
    """What this attempt teaches the learner of its memory: (command, template, kind, bytes, name), or None."""
    if not ctx.config.learn_enabled:
        return None
    state, reached = outcome.state, _reached(outcome)
    if state == "completed" and reached:
        kind, nbytes = "peak", int(reached)
    elif state == "oom" and within_claim(current, outcome):
        kind, nbytes = "floor", int(reached)  # it needed at least what it reached; the claim was not the cause
    elif state == "oom":
        claim = current.claims.mem
        kind, nbytes = "floor", max(2 * claim, int(reached or 0))
    else:
        return None  # killed, timed out, failed: what it reached says nothing about what it needs
    if ctx.mem_total:  # (a floor doubles a claim: no more than the machine, whose learner reads no more)
        nbytes = min(nbytes, ctx.mem_total)
    return current.command, current.template, kind, nbytes, current.name


def teach(ctx: Context, lessons: list) -> None:
    """Teach the learner lessons (``_lessons``) under its own lock, in one write."""
    from qex.jobs import learn

    try:
        note = learn.teach(ctx.store.root, lessons, mode=ctx.store.file_mode)
    except Exception as exc:  # the learner never costs a job its record
        note = f"learner: not taught ({type(exc).__name__}: {exc})"
    if note:
        import sys

        print(f"qex: {note}", file=sys.stderr)
