"""The one-place rules of issue 23 (points 4, 5, 6, 11) and 29 (point 5), in process:

- the reserve: ``Config.resolve_reserve`` (and ``Context.holdable``, what an idle
  machine can hold), and the words of a job that waits on it (``qex.admit``);
- the records clean keeps: ``qex.store.needed.still_needed``;
- the OOM answer when the peak stayed under the claim: ``qex.supervisor.memory``;
- the submission's refusal of a claim above the machine (``qex.jobs.submit``).

The end-to-end tests of each point are in tests/e2e/test_trust_limits.py and
tests/e2e/test_memory.py.
"""

import os

import pytest

from qex.admit import Queued, Snapshot, admit
from qex.base.errors import SpecError
from qex.config.context import Context
from qex.config.model import Config
from qex.jobs.claims import resolve_claims
from qex.jobs.request import Request
from qex.store.needed import still_needed
from qex.store.state import Store
from qex.supervisor import memory

MiB, GiB = 1 << 20, 1 << 30


def make_ctx(root, mem_total=16 * GiB, cores=8, **config) -> Context:
    store = Store(str(root))
    store.ensure()
    base = Config.default(os.path.join(str(root), "none.toml"))
    return Context(
        store=store,
        config=base.evolve(**config) if config else base,
        uid=os.getuid(),
        user="tester",
        cores=cores,
        mem_total=mem_total,
    )


# -- the reserve --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "mode", "reserve"),
    [
        (2 * GiB, "cooperative", 2 * GiB // 10),
        (64 * GiB, "cooperative", 2 * GiB),
        (20 * GiB, "cooperative", 2 * GiB),
        (2 * GiB, "single-user", 2 * GiB // 10),
        (64 * GiB, "single-user", 512 * MiB),
        (0, "cooperative", 0),
    ],
)
def test_the_default_reserve_is_a_tenth_of_the_memory_at_most_2gb_or_512mb_single_user(total, mode, reserve):
    assert Config.default("/x").evolve(mode=mode).resolve_reserve(total) == reserve


def test_a_reserve_the_config_sets_is_taken_as_written():
    assert Config.default("/x").evolve(reserve_mem=3 * GiB).resolve_reserve(2 * GiB) == 3 * GiB
    assert Config.default("/x").evolve(reserve_mem=0).resolve_reserve(64 * GiB) == 0


def test_what_an_idle_machine_holds_is_its_cores_and_its_memory_less_the_reserve(tmp_path):
    assert make_ctx(tmp_path, mem_total=2 * GiB, cores=2).holdable() == (2000, 2 * GiB - 2 * GiB // 10)
    assert make_ctx(tmp_path, mem_total=0).holdable()[1] is None  # unknown memory: no refusal


def _reason(available, reserve, mem):
    snap = Snapshot(
        now=1.0,
        cpu_budget=8000,
        mem_budget=16 * GiB,
        mem_available=available - reserve,
        oversized="run-when-idle",
        max_bypass=2,
        pools=(),
        running=(),
        peers=(),
        queued=(Queued(id="a", seq=1, cpu=1000, mem=mem),),
        mem_reserve=reserve,
    )
    plan = admit(snap)
    assert not plan.start
    (wait,) = plan.wait
    return wait.reason, plan.health


def test_a_job_that_fits_but_for_the_reserve_names_the_reserve_and_the_setting():
    reason, health = _reason(available=250 * MiB, reserve=205 * MiB, mem=100 * MiB)
    assert "reserve" in reason and "[system] reserve_mem" in reason and "205MB" in reason, reason
    assert "outside qex" not in reason and "reserve" in health, (reason, health)


def test_a_job_that_would_not_fit_even_without_the_reserve_waits_for_memory_outside_qex():
    reason, _ = _reason(available=50 * MiB, reserve=205 * MiB, mem=100 * MiB)
    assert "outside qex" in reason and "[system] reserve_mem" in reason, reason


# -- a claim above the machine -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cpu", "mem", "option"), [("9", "1GB", "--cpu"), ("1", "15GB", "--mem"), ("1", "max", "--mem")]
)
def test_a_claim_above_the_machine_is_refused_with_never_and_its_size(tmp_path, cpu, mem, option):
    ctx = make_ctx(tmp_path, budget_mem=100 * GiB)  # an absolute budget above the machine
    with pytest.raises(SpecError) as e:
        resolve_claims(ctx, Request(command=["true"], cpu=cpu, mem=mem))
    said = str(e.value)
    assert said.startswith(option) and "never" in said and ("16GB" in said or "has 8" in said), said


def test_the_unset_default_memory_of_a_one_core_machine_fits_it(tmp_path):
    ctx = make_ctx(tmp_path, mem_total=2 * GiB, cores=1)
    claims, sources, _ = resolve_claims(ctx, Request(command=["true"]))
    assert claims["mem"] == 2 * GiB - 2 * GiB // 10 and sources["mem"] == "default"


# -- what clean keeps ---------------------------------------------------------------------------


def test_still_needed_keeps_needs_after_and_a_working_group_and_nothing_else():
    active = [
        ("q1", {"state": "queued", "needs": ["a"], "after": ["b"]}),
        ("r1", {"state": "running", "group": "g", "group_name": "nightly"}),
        ("q2", {"state": "queued", "needs": ["a"]}),
    ]
    kept = still_needed(active, {"a": None, "b": None, "c": None, "m": "g", "n": "other"})
    assert set(kept) == {"a", "b", "m"}
    assert kept["a"]["needed_by"] == "q1" and "--needs" in kept["a"]["why"] and "q1" in kept["a"]["why"]
    assert kept["b"]["needed_by"] == "q1" and "--after" in kept["b"]["why"]
    assert kept["m"]["needed_by"] == "r1" and "nightly" in kept["m"]["why"]
    assert still_needed([], {"a": None}) == {}


# -- the OOM answer -----------------------------------------------------------------------------


def _oom(ctx, claim, peak, retries=1):
    from qex.store.records import Status, load

    current = load(
        Status,
        {
            "id": "j",
            "seq": 1,
            "state": "running",
            "cwd": "/",
            "owner": "me",
            "uid": 0,
            "attempt": 1,
            "attempts": [],
            "oom_retries": retries,
            "command": ["x"],
            "claims": {"cpu": 1.0, "mem": claim, "pools": {}},
            "claim_source": {"mem": "user"},
        },
    )
    from qex.store.records import Usage
    from qex.supervisor.working import Outcome

    outcome = Outcome("oom", 1.0, oom_evidence="cgroup", usage=Usage(max_rss=peak))
    lessons = []
    outcome, retry = memory.settle(ctx, current, outcome, lessons)
    return retry, outcome, lessons


def test_an_oom_under_the_claim_on_the_machine_keeps_the_claim_and_names_the_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("QEX_CGROUP", "off")  # no cgroup qex runs in to name: the machine's memory
    ctx = make_ctx(tmp_path)
    retry, outcome, lessons = _oom(ctx, claim=300 * MiB, peak=200 * MiB)
    said = outcome.error
    assert "too small" not in said and "the machine's memory (16GB)" in said, said
    assert "keeps the claim of 300MB" in said and "claims" not in retry, retry
    assert "same claim" in retry["blocked_reason"]
    assert lessons[0][2:4] == ("floor", 200 * MiB)  # what it reached, never a doubled claim


def test_an_oom_over_the_claim_still_doubles_it(tmp_path, monkeypatch):
    monkeypatch.setenv("QEX_CGROUP", "off")
    ctx = make_ctx(tmp_path)
    retry, outcome, lessons = _oom(ctx, claim=100 * MiB, peak=150 * MiB)
    assert "the claim of 100MB was too small" in outcome.error
    assert retry["claims"].mem == 200 * MiB and lessons[0][2:4] == ("floor", 200 * MiB)


def test_a_doubled_claim_is_capped_at_what_an_idle_machine_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("QEX_CGROUP", "off")
    ctx = make_ctx(tmp_path, mem_total=4 * GiB, budget_mem=100 * GiB)  # an absolute budget above the machine
    retry, _, _ = _oom(ctx, claim=3 * GiB, peak=3 * GiB + MiB)
    assert retry["claims"].mem == 4 * GiB - 4 * GiB // 10  # never a claim that could never start
