"""`qex status --word ID`: the one line a workflow manager's status command needs
(running, success or failed; qex.base.states.workflow_word decides), exit 0."""

from e2e_helpers import gated, open_gate


def _word(q, ident):
    proc = q.run("status", "--word", ident)
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr)
    return proc.stdout


def test_status_word_maps_every_state_to_running_success_or_failed(q):
    running = q.submit("--cpu", "0.25", "--mem", "16MB", "--", *gated(q, "go"))
    queued = q.submit("--cpu", "0.25", "--mem", "16MB", "--needs", running, "--", "true")
    ok = q.submit("--cpu", "0.25", "--mem", "16MB", "--", "true")
    bad = q.submit("--cpu", "0.25", "--mem", "16MB", "--", "sh", "-c", "exit 3")
    q.wait_state(running, "running")
    assert q.record(queued)["state"] == "queued"
    assert _word(q, running) == "running\n" and _word(q, queued) == "running\n"
    q.wait_state(ok, "completed")
    q.wait_state(bad, "failed")
    assert _word(q, ok) == "success\n" and _word(q, bad) == "failed\n"
    q.run("kill", running, check=0)
    q.wait_state(queued, "skipped")
    assert _word(q, running) == "failed\n" and _word(q, queued) == "failed\n"  # killed, skipped
    open_gate(q, "go")


def test_status_word_refuses_json_with_2_and_an_unknown_id_with_127(q):
    ok = q.submit("--cpu", "0.25", "--mem", "16MB", "--", "true")
    proc = q.run("status", "--word", "--json", ok)
    assert proc.returncode == 2 and proc.stdout == "" and "--word" in proc.stderr and "--json" in proc.stderr
    proc = q.run("status", "--word", "no-such-job")
    assert proc.returncode == 127 and proc.stdout == ""


def test_the_profile_qex_help_workflows_and_the_docs_show_is_the_one_shipped(q):
    """integrations/snakemake/qex (the profile the Snakemake tests run) is what
    `qex help workflows` and docs/integrations.md print, line for line."""
    import os

    from wfm_helpers import PROFILE, REPO

    with open(os.path.join(PROFILE, "config.yaml")) as fh:
        lines = [ln.rstrip() for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    assert os.access(os.path.join(PROFILE, "qex-cancel"), os.X_OK)
    topic = q.run("help", "workflows", check=0).stdout
    with open(os.path.join(REPO, "docs", "integrations.md")) as fh:
        docs = fh.read()
    for line in lines:
        assert f"    {line}\n" in topic, line
        assert f"{line}\n" in docs, line
    with open(os.path.join(PROFILE, "qex-cancel")) as fh:  # shown whole in the docs, without its comments
        code = "".join(ln for ln in fh if ln.startswith("#!") or not ln.lstrip().startswith("#"))
    assert f"```sh\n{code}```\n" in docs


def test_status_word_of_a_group_is_success_only_when_every_member_completed(q, tmp_path):
    good, mixed = tmp_path / "good.txt", tmp_path / "mixed.txt"
    good.write_text("0\n0\n")
    mixed.write_text("0\n3\n")
    ok = q.run(
        "submit", "--each-line", str(good), "--cpu", "0.25", "--mem", "16MB", "--", "sh", "-c", "exit {}", check=0
    ).stdout.strip()
    bad = q.run(
        "submit", "--each-line", str(mixed), "--cpu", "0.25", "--mem", "16MB", "--", "sh", "-c", "exit {}", check=0
    ).stdout.strip()
    q.run("wait", "--quiet", ok, bad)
    assert _word(q, ok) == "success\n" and _word(q, bad) == "failed\n"
