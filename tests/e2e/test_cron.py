"""Issue 29: qex under a real Debian ``cron``, as a crontab's user meets it.

One test (about two minutes: two ticks of a one-minute crontab), under the
``cron`` marker: the README's test command leaves it out (pyproject's addopts),
``.ci/run`` runs it on its own (``pytest -m cron``). It starts ``cron -f``
(skipped, with the reason, where there is no cron, no root, or a cron daemon
runs already), installs a crontab for a test user whose lines are the recipes
of docs/cron.md, and reads what cron mailed to that user: with the machine's
MTA where ``/usr/sbin/sendmail`` exists (exim's local delivery to
``/var/mail/USER``), else a stand-in sendmail the test writes there and removes.
The daemon is stopped by its pid.

After two ticks:

- ``qex run --output on-failure`` of a job that succeeds mailed nothing;
- the same of a job that fails mailed, each tick, a verdict line and the job's
  output;
- ``flock -n LOCK qex submit --quiet --dedupe-key ...`` of a job longer than a
  tick took the lock at both ticks (qex leaves no process holding it) and
  mailed nothing (the second tick is deduplicated, quietly);
- ``qex wait --quiet "$(qex pipeline --quiet FILE)"`` mailed nothing.
"""

import os
import shutil
import signal
import subprocess
import time

import pytest
from multiuser_helpers import Users, kill_everything_under

pytestmark = pytest.mark.cron

STAND_IN = """#!/bin/sh
# A stand-in MTA for the cron test: append the message to /var/mail/$USER (mbox).
user=$(id -un)
{ echo "From cron $(date)"; cat; echo; } >> "/var/mail/$user"
"""


def _mbox(user: str) -> str:
    try:
        with open(f"/var/mail/{user}", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _messages(user: str) -> list[str]:
    text = _mbox(user)
    parts = [p for p in ("\n" + text).split("\nFrom ") if p.strip()]
    return parts


def _cron_running() -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as fh:
                if fh.read().strip() in ("cron", "crond"):
                    return True
        except OSError:
            continue
    return False


@pytest.fixture
def user():
    if os.getuid() != 0:
        pytest.skip("the cron test makes a user and starts cron: it needs root")
    if not shutil.which("cron") or not shutil.which("crontab"):
        pytest.skip("Debian's cron is not installed (apt-get install cron; .ci/run installs it where it can)")
    if _cron_running():
        pytest.skip("a cron daemon runs already on this machine: the test starts its own")
    users = Users()
    why = users.create()
    if why:
        users.remove()
        pytest.skip(why)
    try:
        yield users
    finally:
        users.remove()


def test_cron_mails_only_failures_and_flock_never_blocks_a_tick(user, tmp_path):
    name = user.names[0]
    uid = user.uid(name)
    home = os.path.join(user.base, "home")
    os.makedirs(os.path.join(home, "bin"))
    state, config = os.path.join(home, "state"), os.path.join(home, "qex.toml")
    with open(config, "w") as fh:
        fh.write('[budget]\ncpu = "2"\nmem = "2GB"\n[defaults]\ncpu = 0.5\nmem = "50MB"\n')
    with open(os.path.join(home, "bin", "qex"), "w") as fh:
        # (Users' probe runs under setpriv, which may keep root's reach; cron's session does not.)
        fh.write(
            f"#!/bin/sh\nfor py in {user.python} /usr/bin/python3; do\n"
            '  "$py" -c "import qex.cli" 2>/dev/null && exec "$py" -m qex "$@"\n'
            'done\necho "qex: no python that this user can run qex with" >&2; exit 121\n'
        )
    os.chmod(os.path.join(home, "bin", "qex"), 0o755)
    with open(os.path.join(home, "nightly.toml"), "w") as fh:
        fh.write(
            '[[jobs]]\nname = "fetch"\ncommand = ["sh", "-c", "echo fetched"]\n'
            '[[jobs]]\nname = "report"\ncommand = ["sh", "-c", "echo reported"]\nneeds = ["fetch"]\n'
        )
    for root, dirs, files in os.walk(home):
        for entry in [root] + [os.path.join(root, f) for f in files]:
            os.chown(entry, uid, -1)

    stand_in = None
    if not os.path.exists("/usr/sbin/sendmail"):
        stand_in = "/usr/sbin/sendmail"
        with open(stand_in, "w") as fh:
            fh.write(STAND_IN)
        os.chmod(stand_in, 0o755)
    mailbox = f"/var/mail/{name}"
    if os.path.exists(mailbox):
        os.remove(mailbox)

    ticks = os.path.join(home, "ticks")
    # The recipes of docs/cron.md (qex help cron), one a line; each tick appends what flock said.
    crontab = "\n".join(
        [
            f"PATH={home}/bin:/usr/bin:/bin",
            f"MAILTO={name}",
            f"QEX_STATE_DIR={state}",
            f"QEX_CONFIG={config}",
            f"QEX_PEER_DIR={home}/peers",
            f"PYTHONPATH={user.pythonpath}",
            "PYTHONDONTWRITEBYTECODE=1",
            "* * * * * qex run --output on-failure --name fine -- sh -c 'echo all-good; echo fine-err >&2'",
            "* * * * * qex run --output on-failure --name broken -- sh -c 'echo broken-output; echo broken-err >&2; exit 3'",
            f"* * * * * flock -n {home}/nightly.lock qex submit --quiet --dedupe-key nightly --name nightly -- sleep 75;"
            f" echo flock=$? >> {ticks}",
            f'* * * * * qex wait --quiet "$(qex pipeline --quiet {home}/nightly.toml)" || qex status nightly',
            "",
        ]
    )
    tab = tmp_path / "crontab"
    tab.write_text(crontab)
    subprocess.run(["crontab", "-u", name, str(tab)], check=True, capture_output=True)
    daemon = subprocess.Popen(
        ["cron", "-f"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 170
        while time.monotonic() < deadline:
            said = open(ticks).read().split() if os.path.exists(ticks) else []
            if len(said) >= 2 and len(_messages(name)) >= 2:
                break
            assert daemon.poll() is None, daemon.stdout.read().decode(errors="replace")
            time.sleep(1)
        time.sleep(8)  # what the second tick's other lines would mail
        said = open(ticks).read().split() if os.path.exists(ticks) else []
        mails = _messages(name)
    finally:
        os.kill(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait()
        subprocess.run(["crontab", "-u", name, "-r"], capture_output=True)
        kill_everything_under(user.base)
        if stand_in:
            os.remove(stand_in)
    try:
        assert said[:2] == ["flock=0", "flock=0"], f"flock -n blocked a tick: {said}"
        assert len(mails) >= 2, f"cron mailed {len(mails)} messages in two ticks: {mails}"
        for mail in mails:
            assert "broken-output" in mail and "broken-err" in mail, mail
            assert "exit 3" in mail and "failed" in mail, mail  # the verdict line
            for quiet in ("all-good", "fine-err", "deduplicated", "fetched", "reported", "queued as group"):
                assert quiet not in mail, (quiet, mail)
        assert len(mails) == len(said), f"one mail per tick, of the failure only: {len(mails)} for {said}"
    finally:
        if os.path.exists(mailbox):
            os.remove(mailbox)
