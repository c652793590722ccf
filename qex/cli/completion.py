"""qex completions SHELL (bash, zsh, fish), generated from the parser, and the hidden
fast path the scripts call for the values that live in the state directory.

The script knows each command's own options (never one a command does not take:
``run`` offers no ``--each-line``), the fixed values (states after ``--state``, the help
topics, the schema kinds, every ``choices``), and asks ``qex __complete KIND`` for the
rest: ``jobs`` (the ids, names and group names of the queued and running jobs, then of
the recent ended ones), ``names``, ``pools`` (the config's pools, after ``--claim``,
``--lock``, ``pause lock``). That path (``values``) runs before the parser is built,
reads ``index.json``, the end of ``history.jsonl`` and the config file as they are, never
takes a lock, never starts anything, and prints nothing at all rather than an error: a
completion must never fail loudly. An index a few events behind the journal (a
supervisor saves it lazily) only misses a job that a supervisor has just changed.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace

HIDDEN = "__complete"
RECENT_BYTES = 96 << 10  # the end of history.jsonl read for the recent ended jobs (~300 lines)


def values(argv: list[str]) -> int:
    """``qex __complete KIND [PREFIX]``: one value a line, those that start with PREFIX."""
    kind, prefix = (argv + ["", ""])[:2]
    try:
        found = {"jobs": lambda: _jobs(names_only=False), "names": lambda: _jobs(names_only=True), "pools": _pools}[
            kind
        ]()
        sys.stdout.write("".join(f"{w}\n" for w in found if w.startswith(prefix)))
    except Exception:  # (a damaged file, a missing directory, a closed pipe: no values)
        pass
    return 0


def _root() -> str:
    from qex.base.paths import state_dir
    from qex.store import layout

    root = state_dir()
    if os.path.exists(os.path.join(root, layout.INDEX)):
        return root

    uid = os.getuid()
    for name in sorted(os.listdir(root)):  # a shared directory: this user's own member directory
        if layout.member_of(name) == uid and os.stat(os.path.join(root, name)).st_uid == uid:
            return os.path.join(root, name)
    return root


# index.json as the store writes it: compact, one entry a job, each with one "name",
# "group" and "group_name" key (``qex.store.index.entry_of``; a string's quotes inside a
# value are escaped, so these cannot occur in one). Four scans for a literal over the
# bytes take a quarter of the time a parse of 10,000 entries takes; a file of another
# form (the counts differ) is parsed.
_KEY = rb'":\{"seq":(\d+),'
_NAME, _GROUP, _GROUP_NAME = (
    rb'"name":"([^"\\]*)"',
    rb'"group":(?:null|"([^"\\]*)")',
    rb'"group_name":(?:null|"([^"\\]*)")',
)


def _jobs(names_only: bool) -> list[str]:
    """Active jobs first (newest first), then the recent ended ones: names, group names, ids."""
    from qex.store import layout

    root = _root()
    rows = _active(os.path.join(root, layout.INDEX)) + _recent(os.path.join(root, layout.HISTORY))
    seen: dict[str, None] = {}
    for row in rows:
        for key in ("name", "group_name") if names_only else ("name", "group_name", "id", "group"):
            word = row.get(key)
            if isinstance(word, str) and word and word.isprintable() and " " not in word:
                seen.setdefault(word)
    return list(seen)


def _active(path: str) -> list[dict]:
    import re

    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return []
    keys = [(data[m.start() - 36 : m.start()], int(m.group(1))) for m in re.finditer(_KEY, data)]
    columns = [re.findall(_NAME, data), re.findall(_GROUP, data), re.findall(_GROUP_NAME, data)]
    if all(len(c) == len(keys) for c in columns):
        found = [
            (seq, {"id": j.decode(), "name": n.decode(), "group": g.decode(), "group_name": gn.decode()})
            for (j, seq), n, g, gn in zip(keys, *columns)
        ]
    else:  # (another form: parse it)
        import json

        jobs = json.loads(data).get("jobs") or {}
        found = [(e.get("seq") or 0, {**e, "id": j}) for j, e in jobs.items() if isinstance(e, dict)]
    found.sort(key=lambda item: -item[0])
    return [row for _, row in found]


def _recent(path: str) -> list[dict]:
    import json

    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - RECENT_BYTES))
            data = fh.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if size > RECENT_BYTES:
        lines = lines[1:]  # (cut in the middle)
    out = []
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            out.append(row)
    return out


def _pools() -> list[str]:
    import tomllib

    from qex.base.paths import config_path

    with open(config_path(), "rb") as fh:
        pools = tomllib.load(fh).get("pool") or []
    return [p["name"] for p in pools if isinstance(p, dict) and isinstance(p.get("name"), str)]


# ---- the scripts ------------------------------------------------------------------------

# An option's or a positional's values: ("words", [...]) fixed, ("ask", KIND) from
# `qex __complete KIND`, ("files",) the shell's files, None nothing to offer.


def _spec() -> list[tuple[str, list[str], dict[str, tuple], tuple | None, dict[str, str]]]:
    """(command, its options, values per option, values of its positional, the short
    form of each long option that has one) from the parser."""
    import argparse

    from qex.cli.helptext import TOPICS
    from qex.cli.parser import build

    parser = build()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        opts, per_option, positional, shorts = [], {}, None, {}
        for a in p._actions:
            if a.help == argparse.SUPPRESS or isinstance(a, argparse._HelpAction):
                continue
            if not a.option_strings:
                positional = positional or _positional(name, a, TOPICS)
                continue
            opts += a.option_strings
            if len(a.option_strings) == 2:
                shorts[a.option_strings[1]] = a.option_strings[0]
            if a.nargs != 0:
                for o in a.option_strings:
                    per_option[o] = _option_values(name, o, a)
        if name in ("pause", "resume"):
            per_option["lock"] = ("ask", "pools")  # pause lock NAME
        out.append((name, sorted(opts, key=lambda o: (o.startswith("--"), o)), per_option, positional, shorts))
    return out


def _option_values(command: str, option: str, a) -> tuple | None:
    if a.choices:
        return ("words", list(a.choices))
    known = getattr(a.type, "known", None)  # --state S[,S...] (parser._state_list)
    if known:
        return ("words", list(known))
    if option in ("--claim", "--lock"):
        return ("ask", "pools")
    if option in ("--group", "--needs", "--after"):
        return ("ask", "jobs")
    if option == "--name" and command in ("list", "kill", "cancel"):
        return ("ask", "names")
    if a.metavar in ("FILE", "DIR", "FILE|-") or option in ("--cwd", "--job", "--id-file", "--each-line", "--stdin"):
        return ("files",)
    return None


def _positional(command: str, a, topics) -> tuple | None:
    if a.choices:
        return ("words", list(a.choices))
    if command == "help":
        from qex.cli.parser import COMMANDS

        return ("words", sorted(topics) + list(COMMANDS))
    if command == "pause":
        return ("words", ["queue", "lock"])
    if command == "resume":
        return ("words", ["queue", "lock"])
    if a.metavar == "ID":
        return ("ask", "jobs")
    if a.metavar == "FILE":
        return ("files",)
    return None


def cmd_completions(args: Namespace) -> int:
    spec = _spec()
    from qex.cli import completion_scripts as scripts

    text = {"bash": scripts.bash, "zsh": scripts.zsh, "fish": scripts.fish}[args.shell](spec)
    sys.stdout.write(text)
    return 0
