"""From the words a user types to jobs: a full id, a unique prefix (>= 4
characters), a name of a queued or running job, a group id or a group name.
A word that matches two things is refused and lists them."""

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

    def __init__(self, word: str, job: str | None = None, group: str | None = None,
                 members: list[str] | None = None, group_name: str | None = None):
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
    members = [m for m in data["members"] if isinstance(m, str) and "/" not in m
               and os.path.exists(store.path(m, layout.STATUS))]
    return {**data, "members": members} if members else None


def resolve(store: Store, word: str) -> Target:
    """One word -> a Target, or NoSuchJob (127) / AmbiguousId (2)."""
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
                    matches[f"group {gid}"] = Target(word, group=gid, members=list(g["members"]),
                                                     group_name=g.get("name"))
    if not matches:
        for job_id, entry in _read_index(store).items():
            if entry.get("name") == word:
                matches[f"job {job_id} ({entry.get('state')})"] = Target(word, job=job_id)
        matches.update(_groups_named(store, word))
    if not matches and store.shared_root is not None:
        matches.update(_others_matching(store, word))
    if len(matches) == 1:
        return next(iter(matches.values()))
    shown = units.safe_text(word)
    if not matches:
        raise NoSuchJob(f"no job or group with the id {shown!r}")
    listed = "; ".join(sorted(matches)[:10])
    raise AmbiguousId(f"{shown!r} matches {len(matches)} things: {listed}; give more of the id")


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
            if user == who:
                for job_id, entry in other.read_index_jobs().items():
                    if entry.get("name") == name:
                        found[f"job {job_id} of {who} ({entry.get('state')})"] = Target(word, job=job_id)
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


def _groups_named(store, word: str) -> dict[str, Target]:
    """Groups called ``word``: the active ones; if none is active, every one that is
    left (so ``qex wait NAME`` right after the group ended still finds it, and two
    ended groups of one name are refused as ambiguous rather than guessed)."""
    index = _read_index(store)
    named, active = {}, {}
    for gid in _group_ids(store):
        g = read_group(store, gid)
        if g is None or g.get("name") != word:
            continue
        t = Target(word, group=gid, members=list(g["members"]), group_name=g.get("name"))
        named[f"group {gid}"] = t
        if _group_active(store, g, index):
            active[f"group {gid} (active)"] = t
    return active or named


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
    """--needs/--after: ids must exist; a name must name a queued or running job."""
    store = ctx.store
    out = []
    for word in words:
        try:
            target = resolve(store, word)
            ids = target.members
            if target.is_group and target.group_name == word.strip() and target.group != word.strip() \
                    and not _group_active(store, {"members": ids}):
                raise NoSuchJob(f"the group {units.safe_text(word)!r} has ended")  # a stale group name
        except NoSuchJob as exc:
            stale = _ended_named(store, word.strip())
            if stale:
                raise SpecError(f"{option}: {units.safe_text(word)!r} names no queued or running job or group; "
                                f"it matched only what has ended: {'; '.join(stale)}; "
                                "give the id to depend on an ended job") from None
            raise SpecError(f"{option}: {exc}; give a job id, a prefix of 4 or more characters, "
                            "a group id, or the name of a queued or running job") from None
        except AmbiguousId as exc:
            raise SpecError(f"{option}: {exc}") from None
        out += [j for j in ids if j not in out]
    return out


def _ended_named(store, word: str, limit: int = 5) -> list[str]:
    """Ended jobs and groups called ``word`` (the error path only: it reads every record)."""
    found = []
    for job_id in store.job_ids():
        try:
            rec = store.read_status_dict(job_id)
        except Exception:
            continue
        if rec.get("name") == word:
            found.append(f"job {job_id[:8]} ({rec.get('state')})")
    for gid in _group_ids(store):
        g = read_group(store, gid) or {}
        if g.get("name") == word:
            found.append(f"group {gid[:8]} (ended)")
    return found[:limit] + ([f"and {len(found) - limit} more"] if len(found) > limit else [])
