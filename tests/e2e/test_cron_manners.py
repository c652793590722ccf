"""Issue 29, points 4, 6 (pruning) and 7: qex in a crontab mails only what a person must read.

4. ``qex run --output on-failure`` holds the job's output (every byte) and prints
   it after a one-line verdict only when the job did not succeed; ``--quiet``
   silences every notice (a dedupe's too) but a warning; a deduplicated
   ``qex run`` of a job that its own ``qex run`` follows prints none of its
   output again, and returns its code.
6. The records past the keep rule ([store] max_age, max_records) are pruned by
   a supervisor whose job ended, at most once per [store] prune_every, never one
   that queued or running work still needs.
7. ``qex clean`` alone is a bad command line (2); a non-ASCII ``--name`` is
   refused with its characters written as codes, never as ``?``; ``qex list``
   never cuts a name.
"""

import os
import time

import pytest
from e2e_helpers import gated, open_gate

from qex.base import machine
from qex.store import layout

CONFIG = '[budget]\ncpu = "2"\nmem = "2GB"\n[defaults]\ncpu = 0.5\nmem = "50MB"\n'


@pytest.fixture
def qq(q):
    q.write_config(CONFIG)
    return q


# -- 4. --output on-failure, --quiet, a joined run ----------------------------------------------


def test_output_on_failure_is_silent_on_success_and_gives_every_byte_after_a_verdict_on_failure(qq):
    qq.write_config(CONFIG + '[logs]\nmax_bytes = "64KB"\n')
    ok = qq.run("run", "--output", "on-failure", "--", "sh", "-c", "echo out; echo err >&2")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")

    script = "seq 1 200000; echo to-stderr >&2; exit 3"  # 1.3MB: 20 times the log's limit
    bad = qq.run("run", "--output", "on-failure", "--", "sh", "-c", script)
    assert bad.returncode == 3, bad.stderr
    assert bad.stdout == "".join(f"{i}\n" for i in range(1, 200001)), "every byte, held and then given"
    verdict, *rest = bad.stderr.splitlines()
    assert verdict.startswith("qex: job ") and "failed" in verdict and "exit 3" in verdict, verdict
    assert rest == ["to-stderr"], bad.stderr

    default = qq.run("run", "--", "sh", "-c", "echo out; exit 4")
    assert default.returncode == 4 and default.stdout == "out\n", "the default mode streams as it did"


def test_quiet_silences_the_dedupe_notice_and_keeps_the_stuck_warning(q):
    cores = machine.cores()
    q.write_config(
        '[budget]\ncpu = "0.5"\nmem = "4GB"\n[defaults]\nmem = "100MB"\n'
        '[queue]\noversized = "queue"\n[system]\nstuck_after = "3s"\n'
    )
    held = q.submit("--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")  # waits: too big
    again = q.run("submit", "--quiet", "--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")
    assert (again.returncode, again.stdout) == (0, "") and "deduplicated" not in again.stderr, again.stderr
    assert all(line.startswith("qex: warning:") for line in again.stderr.splitlines()), "warnings stay"
    loud = q.run("submit", "--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")
    assert "deduplicated" in loud.stderr and loud.stdout.strip() == held

    def stuck():
        proc = q.run("submit", "--quiet", "--dedupe-key", "nightly", "--cpu", str(cores), "--", "true")
        return proc if "stuck" in proc.stderr else None

    said = q.wait_for(stuck, timeout=20, what="the stuck warning under --quiet", interval=0.3)
    assert said.returncode == 0 and said.stdout == "" and "[system] stuck_after" in said.stderr
    q.run("cancel", held, check=0)


def test_a_deduplicated_run_joins_the_job_its_own_run_follows_and_prints_nothing_again(qq):
    first = qq.popen("run", "--dedupe-key", "tick", "--", *gated(qq, "a", "echo line; exit 7"))
    job = qq.wait_for(
        lambda: next((r["id"] for r in qq.records() if r["state"] == "running"), None),
        what="the first tick's job to run",
    )
    second = qq.popen("run", "--dedupe-key", "tick", "--", "echo", "never")
    quiet = qq.popen("run", "--quiet", "--output", "on-failure", "--dedupe-key", "tick", "--", "echo", "never")
    qq.wait_for(lambda: len([p for p in (second, quiet) if p.poll() is None]) == 2, what="the joiners")
    time.sleep(0.5)  # (both joined: nothing in their stderr stops them now)
    open_gate(qq, "a")
    out1, _ = first.communicate(timeout=20)
    out2, err2 = second.communicate(timeout=20)
    out3, err3 = quiet.communicate(timeout=20)
    assert first.returncode == 7 and out1 == "line\n"
    assert second.returncode == 7 and out2 == "", "the earlier tick printed it: a >> log gets it once"
    assert f"joining job {job}" in err2, err2
    assert quiet.returncode == 7 and out3 == "" and "exit 7" in err3 and len(err3.splitlines()) == 1, err3
    assert [r["id"] for r in qq.records()] == [job]


# -- 6. the pass prunes what is past the keep rule ------------------------------------------------


def _age_the_stamp(q) -> None:
    stamp = os.path.join(q.state, layout.PRUNED)
    if os.path.exists(stamp):
        os.utime(stamp, (0, 0))


def test_a_supervisor_prunes_records_past_keep_but_never_one_still_needed(qq):
    qq.write_config(CONFIG + '[store]\nmax_records = 1\nprune_every = "1h"\n')
    old = qq.submit("--name", "old", "--", "true")
    qq.wait_state(old, "completed")
    holder = qq.submit("--after", old, "--", *gated(qq, "a"))  # runs after it: needs its record
    qq.wait_state(holder, "running")
    _age_the_stamp(qq)
    ran = qq.submit("--", "true")
    qq.wait_state(ran, "completed")
    qq.wait_for(lambda: os.path.getmtime(os.path.join(qq.state, layout.PRUNED)) > 1, what="a prune")
    time.sleep(0.3)
    assert os.path.isdir(os.path.join(qq.state, "jobs", old)), "still needed by a running job: kept"

    later = qq.submit("--", "true")  # within prune_every: no look
    qq.wait_state(later, "completed")
    time.sleep(0.3)
    assert os.path.isdir(os.path.join(qq.state, "jobs", ran)), "at most one look per prune_every"

    open_gate(qq, "a")
    qq.wait_state(holder, "completed")
    qq.wait_for(lambda: not qq.processes(), what="the holder's supervisor to leave (it may prune as it goes)")
    _age_the_stamp(qq)
    last = qq.submit("--", "true")
    qq.wait_state(last, "completed")
    gone = (old, holder, ran, later)
    qq.wait_for(
        lambda: not any(os.path.exists(os.path.join(qq.state, "jobs", j)) for j in gone),
        what="the records past max_records to go",
    )
    assert os.path.isdir(os.path.join(qq.state, "jobs", last)), "the newest max_records stay"
    listed = qq.run("list", check=0).stdout
    assert last[:8] in listed and old[:8] not in listed


# -- 7. smaller ---------------------------------------------------------------------------------


def test_clean_alone_is_a_bad_command_line(qq):
    proc = qq.run("clean")
    assert proc.returncode == 2 and "clean needs" in proc.stderr, (proc.returncode, proc.stderr)


def test_a_non_ascii_name_is_refused_with_its_characters_written_as_codes(qq):
    proc = qq.run("submit", "--name", "caf\u00e9", "--", "true")
    assert proc.returncode == 121
    assert "caf\\xe9" in proc.stderr and "?" not in proc.stderr.split(";")[0], proc.stderr
    assert "letters, digits" in proc.stderr


def test_list_shows_long_job_names_whole(qq):
    base = "nightly-report-for-the-lab-"
    names = [base + "alpha-2026", base + "alpha-2027"]
    for name in names:
        qq.submit("--name", name, "--", "true")
    listed = qq.run("list", check=0).stdout
    for name in names:
        assert name in listed, listed


def test_pipeline_quiet_prints_only_the_group_id(qq):
    path = os.path.join(qq.root, "nightly.toml")
    with open(path, "w") as fh:
        fh.write('[[jobs]]\nname = "a"\ncommand = ["true"]\n[[jobs]]\nname = "b"\ncommand = ["true"]\nneeds = ["a"]\n')
    proc = qq.run("pipeline", "--quiet", path)
    assert proc.returncode == 0 and proc.stderr == "" and len(proc.stdout.strip()) == 36, proc
    assert qq.run("wait", "--quiet", proc.stdout.strip()).returncode == 0


def test_info_says_the_default_claims_and_how_many_such_jobs_run_at_once(qq):
    text = qq.run("info", check=0).stdout
    line = next(li for li in text.splitlines() if li.startswith("defaults"))
    assert "0.5 cores, 50MB" in line and "4 such job(s) at once" in line, line  # budget 2 cores, 2GB
    import json

    assert json.loads(qq.run("info", "--json", check=0).stdout)["defaults"] == {"cpu": 0.5, "mem": 50 << 20, "fit": 4}
