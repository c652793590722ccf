"""Completion that knows the queue (issue 25): the generated bash script, sourced in a
real bash and called with COMP_WORDS/COMP_CWORD, offers job ids, names and group names
(active first), the states after --state, help topics, schema kinds, the config's pools,
and each command's own options only; its values never take the queue's lock and never
fail loudly. zsh and fish scripts are checked for syntax where those shells exist."""

import fcntl
import os
import shutil
import subprocess
import sys

from e2e_helpers import gated, open_gate

CONFIG = '[budget]\ncpu = 2\nmem = "4GB"\n[defaults]\nmem = "50MB"\n[[pool]]\nname = "scratch"\ncount = 2\n'


def _shim(q) -> str:
    """A directory whose `qex` is this test's qex (the scripts call `qex __complete`)."""
    bin_dir = os.path.join(q.root, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    path = os.path.join(bin_dir, "qex")
    with open(path, "w") as fh:
        fh.write(f'#!/bin/sh\nexec {sys.executable} -m qex "$@"\n')
    os.chmod(path, 0o755)
    return bin_dir


def _complete(q, script: str, *words: str) -> list[str]:
    """COMPREPLY of `_qex` for the command line ``words`` (the last one is being completed)."""
    quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in ("qex",) + words)
    line = (
        f'source \'{script}\'; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; _qex; printf "%s\\n" "${{COMPREPLY[@]}}"'
    )
    env = {**q.env, "PATH": f"{_shim(q)}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, cwd=q.root, timeout=30)
    assert proc.returncode == 0 and proc.stderr == "", (words, proc.stderr)
    return [w for w in proc.stdout.splitlines() if w]


def test_bash_completes_ids_names_groups_states_topics_pools_and_only_each_commands_options(q, tmp_path):
    q.write_config(CONFIG)
    script = tmp_path / "qex.bash"
    script.write_text(q.run("completions", "bash", check=0).stdout)
    ended = q.submit("--name", "prep-old", "--", "true")
    q.wait_state(ended, "completed")
    running = q.submit("--name", "train-a", "--", *gated(q, "a"))
    q.wait_state(running, "running")
    lines = tmp_path / "sweep.txt"
    lines.write_text("x\n")
    q.run("pause", "queue", check=0)
    q.run("submit", "--each-line", lines, "--name", "sweep", "--", "echo", "{}", check=0)

    assert _complete(q, str(script), "wait", "tr") == ["train-a"]
    assert _complete(q, str(script), "kill", running[:6]) == [running]
    offered = _complete(q, str(script), "status", "")
    assert {"train-a", "sweep", running, ended, "prep-old"} <= set(offered), offered
    assert offered.index("train-a") < offered.index("prep-old")  # active first, then ended
    assert _complete(q, str(script), "list", "--state", "ru") == ["running"]
    assert _complete(q, str(script), "kill", "--state", "") == ["queued", "starting", "running", "active"]
    assert _complete(q, str(script), "list", "--group", "sw") == ["sweep"]
    assert _complete(q, str(script), "help", "ag") == ["agents"]
    assert _complete(q, str(script), "schema", "me") == ["message"]
    assert _complete(q, str(script), "submit", "--lock", "") == ["scratch"]
    assert _complete(q, str(script), "pause", "lock", "scr") == ["scratch"]
    assert _complete(q, str(script), "run", "--each") == []  # run takes no --each-line
    assert _complete(q, str(script), "submit", "--each") == ["--each-line"]
    assert "--line-numbers" in _complete(q, str(script), "logs", "--")
    assert _complete(q, str(script), "ki") == ["kill"]
    touched = subprocess.run(  # asking the queue leaves the user's shell as it was: globbing and IFS
        [
            "bash",
            "-c",
            f"source '{script}'; COMP_WORDS=(qex wait tr); COMP_CWORD=2; _qex; "
            'printf "%s|%q|%s\\n" "$-" "$IFS" "${COMPREPLY[*]}"',
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env={**q.env, "PATH": f"{_shim(q)}:{os.environ['PATH']}"},
    )
    flags, ifs, offered_here = touched.stdout.strip().split("|")
    assert "f" not in flags and ifs == "$' \\t\\n'" and offered_here == "train-a", touched.stdout

    if shutil.which("fish"):  # the fish script offers the same, where fish is installed
        fish = tmp_path / "qex.fish"
        fish.write_text(q.run("completions", "fish", check=0).stdout)
        asked = subprocess.run(
            ["fish", "-c", f"source {fish}; complete -C 'qex wait tr'; complete -C 'qex run --each'"],
            capture_output=True,
            text=True,
            timeout=30,
            env={**q.env, "PATH": f"{_shim(q)}:{os.environ['PATH']}"},
        )
        assert asked.stdout.split() == ["train-a"], (asked.stdout, asked.stderr)
    with open(os.path.join(q.state, "lock"), "rb+") as held:  # completion never waits for the queue's lock
        fcntl.flock(held, fcntl.LOCK_EX)
        assert _complete(q, str(script), "wait", "tr") == ["train-a"]
    with open(os.path.join(q.state, "index.json"), "w") as fh:
        fh.write("{not json")
    broken = q.run("__complete", "jobs")
    assert broken.returncode == 0 and broken.stderr == ""  # never loudly
    assert "prep-old" in broken.stdout  # (the history still answers)
    q.run("resume", check=0)
    open_gate(q, "a")


def test_zsh_and_fish_scripts_parse_where_those_shells_exist(q):
    for shell, check in (("zsh", ["zsh", "-n"]), ("fish", ["fish", "--no-execute"]), ("bash", ["bash", "-n"])):
        text = q.run("completions", shell, check=0).stdout
        assert "__complete" in text and "jobs" in text and "each-line" in text, shell
        if shutil.which(check[0]) is None:
            continue
        path = os.path.join(q.root, f"qex.{shell}")
        with open(path, "w") as fh:
            fh.write(text)
        proc = subprocess.run(check + [path], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, (shell, proc.stderr)
