"""From the words a user types to jobs: a full id, a unique prefix (>= 4
characters), a job's name, a group id or a group's name. A name names the one
queued or running job (or group) of that name, else the newest ended one; two
active ones, or a word that matches two things, are refused and listed.
``resolve`` is the one resolver: every command that takes an ID calls it."""

from __future__ import annotations

import os

from qex.base import units
from qex.base.errors import AmbiguousId, NoSuchJob, SpecError
from qex.store import fs, layout

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.store.state import Store

MIN_PREFIX = 4


class Target:
    """What a word named: one job, or a group with its members (submission order)."""

    def __init__(
        self,
        word: str,
        job: str | None = None,
        group: str | None = None,
        members: list[str] | None = None,
        group_name: str | None = None,
    ):
        self.word, self.job, self.group = word, job, group
        self.members = members or ([job] if job else [])
        self.group_name = group_name

    @property
    def is_group(self) -> bool:
        return self.group is not None


def _read_index(store) -> dict:
    return store.read_index_jobs()


def _groups_dir(store) -> str:
    return os.path.join(store.root, layout.GROUPS)


def read_group(store: Store, group_id: str) -> dict | None:
    """A group file with only the members that exist (None: no such group, or none left)."""
    try:
        data = fs.read_json(os.path.join(_groups_dir(store), layout.group_file(group_id)))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("members"), list):
        return None
    members = [
        m
        for m in data["members"]
        if isinstance(m, str) and "/" not in m and os.path.exists(store.path(m, layout.STATUS))
    ]
    return {**data, "members": members} if members else None


def resolve(store: Store, word: str) -> Target:
    """One word -> a Target, or NoSuchJob (127) / AmbiguousId: the one resolver of every
    command that takes an ID (wait, status, logs, kill, cancel, clean, rerun, list --group,
    --needs/--after). In order: a full job id, a group id, a unique prefix (>= 4) of
    either, a name (``_named``: the active job or group of that name, else the newest
    ended one), and in a shared directory another member's job (``_others_matching``)."""
    word = word.strip()
    if not word:
        raise SpecError("an empty id; give a job id, a prefix of 4 or more characters, a name or a group")
    matches: dict[str, Target] = {}
    if os.path.isdir(store.job_dir(word)) and "/" not in word and not word.startswith("."):
        return Target(word, job=word)
    group = read_group(store, word) if "/" not in word else None
    if group is not None:
        return Target(word, group=word, members=list(group.get("members", [])), group_name=group.get("name"))
    if len(word) >= MIN_PREFIX and all(c in "0123456789abcdef-" for c in word.lower()):
        for job_id in store.job_ids():
            if job_id.startswith(word.lower()):
                matches[f"job {job_id}"] = Target(word, job=job_id)
        for gid in _group_ids(store):
            if gid.startswith(word.lower()):
                g = read_group(store, gid)
                if g is not None:  # a group file none of whose jobs exists names nothing
                    matches[f"group {gid}"] = Target(
                        word, group=gid, members=list(g["members"]), group_name=g.get("name")
                    )
    if not matches and "/" not in word:
        matches = _named(store, word)
    if not matches and store.shared_root is not None:
        matches.update(_others_matching(store, word))
    if len(matches) == 1:
        return next(iter(matches.values()))
    shown = units.safe_text(word)
    if not matches:
        raise NoSuchJob(f"no job or group with the id {shown!r}")
    listed = "; ".join(sorted(matches)[:10])
    raise AmbiguousId(f"{shown!r} matches {len(matches)} things: {listed}; give more of the id")


def name_matches(wanted: str, name: str) -> bool:
    """``--name`` of list, kill and cancel: the name itself, or a shell pattern ('train-*')."""
    if any(c in wanted for c in "*?["):
        from fnmatch import fnmatchcase

        return fnmatchcase(name, wanted)
    return name == wanted


def _named(store: Store, name: str, groups: bool = True, whose: str = "") -> dict[str, Target]:
    """What a name names in one store (CONTRACT.md, "An ID is"): the queued or running
    jobs and the active groups of that name -- one is the answer, two are ambiguous --;
    when none of that name is active, the newest ended job of that name (the most
    recently submitted) and the newest ended group: a name keeps naming its job after
    it ends, however fast that was. Both an ended job and an ended group: ambiguous."""
    index = _read_index(store)
    found: dict[str, Target] = {}
    for job_id, entry in index.items():
        if isinstance(entry, dict) and entry.get("name") == name:
            found[f"job {job_id}{whose} ({units.safe_text(str(entry.get('state')), 20)})"] = Target(name, job=job_id)
    ended_group = None
    if groups:
        active, ended_group = _groups_named(store, name, index)
        found.update(active)
    if found:
        return found
    job = _newest_ended_job(store, name, index)
    if job is not None:
        job_id, state = job
        found[f"job {job_id}{whose} ({units.safe_text(str(state), 20)}, the newest ended of that name)"] = Target(
            name, job=job_id
        )
    if ended_group is not None:
        found.update(ended_group)
    return found


def _newest_ended_job(store: Store, name: str, index: dict) -> tuple[str, object] | None:
    """(id, state) of the most recently submitted ended job called ``name``, or None.
    The history index finds it without reading every record (``qex.store.history``:
    its reader also reads a job directory that neither it nor the active index names)."""
    import json

    from qex.base.states import FINAL
    from qex.store import history

    active = {j: e for j, e in index.items() if isinstance(e, dict)}
    items, _missed = history.listing(store, active, lambda exc: None)
    needle = json.dumps(name).encode()  # a line that cannot name it is not parsed
    best = None
    for seq, job_id, line, rec in items:
        if line is not None:
            if needle not in line:
                continue
            rec = history.read_row(line)
        if rec is None or rec.name != name or rec.state not in FINAL:
            continue
        if best is None or seq >= best[0]:
            best = (seq, job_id, rec.state)
    return None if best is None else best[1:]


def _others_matching(store: Store, word: str) -> dict[str, Target]:
    """A shared directory: another member's job, by its id, a prefix of it, or
    ``user/name`` (a bare name names one's own jobs only, never another's silently)."""
    from qex.base.paths import user_name

    user, _, name = word.rpartition("/") if "/" in word else ("", "", "")
    prefix = len(word) >= MIN_PREFIX and all(c in "0123456789abcdef-" for c in word.lower())
    found: dict[str, Target] = {}
    for uid, other in store.others():
        who = user_name(uid)
        if user:
            if user == who:  # the same rule as one's own names (``_named``), jobs only
                for label, target in _named(other, name, groups=False, whose=f" of {who}").items():
                    found[label] = Target(word, job=target.job)
            continue
        if "/" in word or word.startswith("."):
            continue
        if os.path.isdir(other.job_dir(word)):
            return {f"job {word} of {who}": Target(word, job=word)}
        if prefix:
            for job_id in other.job_ids():
                if job_id.startswith(word.lower()):
                    found[f"job {job_id} of {who}"] = Target(word, job=job_id)
    return found


def _group_ids(store) -> list[str]:
    try:
        return sorted(g for n in os.listdir(_groups_dir(store)) if (g := layout.group_of(n)) is not None)
    except FileNotFoundError:
        return []


def _group_active(store, group: dict, index: dict | None = None) -> bool:
    index = _read_index(store) if index is None else index
    return any(m in index for m in group.get("members", []))


def _groups_named(store, word: str, index: dict) -> tuple[dict[str, Target], dict[str, Target] | None]:
    """Groups called ``word``: the active ones (any member still in the active index),
    and the newest of the ended ones (by its submission time; None: no ended group)."""
    active, newest = {}, None
    for gid in _group_ids(store):
        g = read_group(store, gid)
        if g is None or g.get("name") != word:
            continue
        t = Target(word, group=gid, members=list(g["members"]), group_name=g.get("name"))
        if _group_active(store, g, index):
            active[f"group {gid} (active)"] = t
            continue
        at = g.get("submitted_at")
        at = at if isinstance(at, (int, float)) and not isinstance(at, bool) else 0.0
        if newest is None or (at, gid) >= newest[0]:
            newest = ((at, gid), {f"group {gid} (ended, the newest of that name)": t})
    return active, None if newest is None else newest[1]


def resolve_jobs(store: Store, words: list[str]) -> list[str]:
    """Every job named by ``words`` (groups expand to members), in order, once each."""
    seen, out = set(), []
    for word in words:
        for job_id in resolve(store, word).members:
            if job_id not in seen:
                seen.add(job_id)
                out.append(job_id)
    return out


def resolve_dependencies(ctx: Context, words: list[str], option: str) -> list[str]:
    """--needs/--after (and a job file's needs/after): the jobs the words name, by the
    one resolver (``resolve``: a name of an ended job names the newest ended one, as
    everywhere). A word that names nothing or two things is refused (121, never 127:
    nothing was submitted)."""
    store = ctx.store
    out = []
    for word in words:
        try:
            ids = resolve(store, word).members
        except NoSuchJob as exc:
            raise SpecError(
                f"{option}: {exc}; give a job id, a prefix of 4 or more characters, "
                "a job's name, a group id or a group's name"
            ) from None
        except AmbiguousId as exc:
            raise SpecError(f"{option}: {exc}") from None
        out += [j for j in ids if j not in out]
    return out
