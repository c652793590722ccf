"""GNU make and xargs -P drive qex (docs/integrations.md, qex help workflows): each
recipe line or argument a qex job, make's and xargs's exit codes kept, and a Ctrl-C
of make stops the jobs (qex run owns its job). These run the docs' recipes."""

import json
import os
import shutil
import subprocess

import pytest
from e2e_helpers import gate_command, release
from wfm_helpers import ctrl_c, qex_on_path, start

MAKEFILE = """\
SHELL := qex
.SHELLFLAGS := run --quiet --cpu 0.25 --mem 64MB --name mk --tag make -- /bin/sh -c

all: a.out b.out
\tcat a.out b.out > all.out

%.out:
\techo $* > $@

bad.out:
\texit 3

# A bigger claim for one target:
big.out: .SHELLFLAGS := run --quiet --cpu 0.5 --mem 128MB --name mk-big --tag make -- /bin/sh -c
big.out:
\techo big > $@

# The other way: qex run as a prefix of one recipe line, the shell make's own.
line.out: SHELL := /bin/sh
line.out: .SHELLFLAGS := -c
line.out:
\tqex run --quiet --cpu 0.25 --mem 64MB --name mk-line --tag make -- sh -c 'echo line > $@'
"""

needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _jobs(q, env, *args):
    proc = q.run("list", "--json", *args, env=env, check=0)
    return json.loads(proc.stdout)


@needs_make
def test_make_j2_runs_each_recipe_line_as_a_job_and_keeps_makes_codes(q, tmp_path):
    env = qex_on_path(q)
    (tmp_path / "Makefile").write_text(MAKEFILE)
    ok = start(["make", "-j2", "all", "big.out", "line.out"], env, str(tmp_path))
    out = ok.communicate(timeout=120)[0]
    assert ok.returncode == 0, out
    assert (tmp_path / "all.out").read_text() == "a\nb\n"
    assert (tmp_path / "big.out").read_text() == "big\n" and (tmp_path / "line.out").read_text() == "line\n"
    jobs = _jobs(q, env, "--tag", "make")
    assert sorted(j["name"] for j in jobs) == ["mk", "mk", "mk", "mk-big", "mk-line"]
    assert {j["state"] for j in jobs} == {"completed"}
    claims = {r["name"]: (r["claims"]["cpu"], r["claims"]["mem"]) for r in q.records()}
    assert claims["mk-big"] == (0.5, 128 << 20) and claims["mk"] == (0.25, 64 << 20)  # a target's own claim

    bad = start(["make", "-j2", "-k", "bad.out", "c.out"], env, str(tmp_path))
    out = bad.communicate(timeout=120)[0]
    assert bad.returncode == 2, out  # make's own code for a failed recipe
    assert "bad.out] Error 3" in out  # the job's code, as make saw it
    assert (tmp_path / "c.out").read_text() == "c\n"  # -k went on
    failed = [r for r in q.records() if r["state"] == "failed"]
    assert len(failed) == 1 and failed[0]["exit_code"] == 3 and failed[0]["command"][-1] == "exit 3"


@needs_make
def test_ctrl_c_of_make_kills_its_qex_jobs(q, tmp_path):
    env = qex_on_path(q)
    gate = str(tmp_path / "gate")
    wait = " ".join(gate_command(gate)[2:])  # the gate loop, as a recipe
    (tmp_path / "Makefile").write_text(
        "SHELL := qex\n.SHELLFLAGS := run --quiet --cpu 0.25 --mem 64MB --name hang -- /bin/sh -c\n"
        f"all: h1 h2\nh1 h2:\n\t{wait}; touch $@\n"
    )
    make = start(["make", "-j2"], env, str(tmp_path))
    try:
        q.wait_for(
            lambda: len(_jobs(q, env, "--name", "hang", "--state", "running")) == 2,
            timeout=60,
            what="both recipes running",
        )
        ctrl_c(make)
        out = make.communicate(timeout=60)[0]
    finally:
        release(gate)
    assert make.returncode != 0, out
    assert "Error 125" in out, out  # each qex run killed its job and said so with 125
    ended = _jobs(q, env, "--name", "hang")
    assert sorted(j["state"] for j in ended) == ["killed", "killed"], ended
    assert not (tmp_path / "h1").exists() and not (tmp_path / "h2").exists()


def test_xargs_P_runs_each_argument_as_a_job_and_keeps_xargs_codes(q, tmp_path):
    env = qex_on_path(q)
    script = tmp_path / "process"
    script.write_text('#!/bin/sh\n[ "$1" = bad ] && exit 3\necho "$1" > "$1.out"\n')
    script.chmod(0o755)
    argv = [
        "xargs",
        "-P",
        "4",
        "-n1",
        "qex",
        "run",
        "--quiet",
        "--cpu",
        "0.25",
        "--mem",
        "64MB",
        "--tag",
        "xargs",
        "--",
        "./process",
    ]
    ok = subprocess.run(
        argv, input="p\nq\nr\ns\n", env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stderr == ""  # --quiet: no notice from qex run
    for name in "pqrs":
        assert (tmp_path / f"{name}.out").read_text() == f"{name}\n"
    bad = subprocess.run(
        argv, input="t\nbad\n", env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 123, bad.stderr  # xargs: some invocation exited 1-125
    jobs = _jobs(q, env, "--tag", "xargs")
    assert len(jobs) == 6
    assert sorted(j["state"] for j in jobs) == ["completed"] * 5 + ["failed"]
    assert os.path.exists(tmp_path / "t.out")


def test_ctrl_c_of_xargs_kills_its_qex_jobs(q, tmp_path):
    env = qex_on_path(q)
    gate = str(tmp_path / "gate")
    argv = [
        "xargs",
        "-P",
        "2",
        "-n1",
        "qex",
        "run",
        "--quiet",
        "--cpu",
        "0.25",
        "--mem",
        "64MB",
        "--name",
        "xa",
        "--",
        *gate_command(gate, then='touch "$0.out"'),
    ]
    (tmp_path / "inputs").write_text("u\nv\n")
    with open(tmp_path / "inputs") as inputs:
        xargs = start(argv, env, str(tmp_path), stdin=inputs)
    try:
        q.wait_for(
            lambda: len(_jobs(q, env, "--name", "xa", "--state", "running")) == 2, timeout=60, what="both jobs running"
        )
        ctrl_c(xargs)
        out = xargs.communicate(timeout=60)[0]
    finally:
        release(gate)
    assert xargs.returncode != 0, out
    assert sorted(j["state"] for j in _jobs(q, env, "--name", "xa")) == ["killed", "killed"]
    assert not (tmp_path / "u.out").exists() and not (tmp_path / "v.out").exists()
