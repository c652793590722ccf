"""qex pipeline FILE: the stages of a pipeline file, validated together, queued as one group.

A pipeline file (TOML, YAML or JSON) has an optional ``name`` (the group's;
default the file's stem) and a list ``jobs`` (``[[jobs]]`` in TOML): each
entry is a job-file table (``qex.jobs.jobfile.JobFile``: command, resources,
env, timeout, tags, ...) with a required ``name``; its ``needs``/``after``
name other entries of the same file, in any order. Every stage is checked
(names, references, cycles, and each stage as ``qex submit`` would check it)
before the first is queued; then all are queued in one lock hold, in an
order where a stage comes after what it names (file order otherwise), so
"submission order" of a group wait follows the pipeline.
"""

import os

from attrs import field, frozen

from qex.base import units
from qex.base.errors import SpecError
from qex.jobs.jobfile import JobFile, apply_to

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from qex.config.context import Context
    from qex.jobs.submit import Built
    from qex.queue.context import PassResult


@frozen
class PipelineFile:
    """The top of a pipeline file (read strictly: an unknown key is an error)."""

    jobs: list[JobFile]  # the stages, in order: each a job-file table with a name (needs/after may name earlier
    # stages)
    name: str | None = None  # the group's name (default: from the file's name)


@frozen
class Stage:
    """One checked entry: its place in the file and its job-file table."""

    index: int
    name: str
    job: JobFile
    needs: tuple[str, ...] = ()
    after: tuple[str, ...] = ()


@frozen
class Plan:
    """A checked pipeline: the group name and the stages in submission order."""

    name: str
    stages: tuple[Stage, ...] = field(factory=tuple)


def load(path: str) -> PipelineFile:
    from qex.jobs.jobfile import read_document
    from qex.store import codec

    data = read_document(path, "pipeline file")
    try:
        return codec.strict().structure(data, PipelineFile)
    except Exception as exc:  # cattrs raises several kinds; all mean "not this shape"
        raise SpecError(
            f"pipeline file {path}: {codec.describe(exc, os.path.basename(path))}; see qex schema pipeline"
        ) from None


def check(doc: PipelineFile, path: str) -> Plan:
    """Names, references and cycles; the stages in submission order. Pure."""
    where = f"pipeline file {path}"
    if not doc.jobs:
        raise SpecError(f"{where} has no jobs; give at least one [[jobs]] entry with a name and a command")
    if doc.name is not None:
        group_name = units.check_name(doc.name, f"{where}: name")
    else:
        group_name = units.safe_name(os.path.splitext(os.path.basename(path))[0])
    stages, seen = [], {}
    for i, job in enumerate(doc.jobs):
        if job.name is None:
            raise SpecError(f"{where}: jobs[{i}] has no name; every stage needs a name that others can name")
        name = units.check_name(job.name, f"{where}: jobs[{i}].name")
        if name in seen:
            raise SpecError(
                f"{where}: the name {name!r} is used by jobs[{seen[name]}] and jobs[{i}]; give each stage its own name"
            )
        seen[name] = i
        if job.dedupe_key is not None:
            raise SpecError(
                f"{where}: stage {name!r} has a dedupe_key; a stage of a pipeline cannot be "
                "deduplicated (its group would point at another job); remove it"
            )
        stages.append(Stage(i, name, job, tuple(job.needs), tuple(job.after)))
    for st in stages:
        for kind, refs in (("needs", st.needs), ("after", st.after)):
            for ref in refs:
                if ref not in seen:
                    known = ", ".join(sorted(seen))
                    raise SpecError(
                        f"{where}: stage {st.name!r} {kind} {units.safe_text(str(ref))!r}, "
                        f"which is no stage of this file (its stages: {known})"
                    )
                if ref == st.name:
                    raise SpecError(f"{where}: stage {st.name!r} names itself in {kind}")
    return Plan(group_name, tuple(_ordered(stages, where)))


def _ordered(stages: list[Stage], where: str) -> list[Stage]:
    """Topological order, file order among the ready; a cycle is refused and shown."""
    by_name = {s.name: s for s in stages}
    waiting = {s.name: set(s.needs) | set(s.after) for s in stages}
    done, out = set(), []
    while len(out) < len(stages):
        ready = [s for s in stages if s.name not in done and waiting[s.name] <= done]
        if not ready:
            raise SpecError(
                f"{where}: the stages wait for each other in a circle "
                f"({_cycle(by_name, waiting, done)}); no stage was submitted"
            )
        out.append(ready[0])
        done.add(ready[0].name)
    return out


def _cycle(by_name, waiting, done) -> str:
    """One cycle among the stages not done, as 'a -> b -> a'."""
    start = next(n for n in by_name if n not in done)
    path, node = [], start
    while node not in path:
        path.append(node)
        node = sorted(d for d in waiting[node] if d not in done)[0]
    loop = path[path.index(node) :] + [node]
    return " -> ".join(loop)


def build_all(ctx: "Context", plan: Plan, path: str, group_id: str) -> "list[Built]":
    """Every stage as qex submit would build it (all checked); needs/after become ids."""
    from qex.jobs.request import Request
    from qex.jobs.submit import build

    built, ids = [], {}
    for st in plan.stages:
        where = f"pipeline file {path}: stage {st.name!r}"
        req = Request(command=[])
        try:
            apply_to(req, st.job, where)
            req.needs, req.after = [], []
            req.group, req.group_name, req.origin = group_id, plan.name, "pipeline"
            b = build(ctx, req)
        except SpecError as exc:
            raise SpecError(f"{where}: {exc}") from None
        ids[st.name] = b.spec.id
        needs, after = [ids[n] for n in st.needs], [ids[n] for n in st.after]
        b.record = b.record.evolve(needs=tuple(needs), after=tuple(after))
        b.spec.request = {**b.spec.request, "needs": needs, "after": after}
        built.append(b)
    return built


def submit(ctx: "Context", path: str) -> "tuple[str, str, list[tuple[str, str]], PassResult, list[Built]]":
    """Check and queue a pipeline file. Returns (group id, group name, [(stage name, id)], PassResult)."""
    from qex.base.ids import new_id
    from qex.jobs import groups

    plan = check(load(path), path)
    group_id = new_id()
    built = build_all(ctx, plan, path, group_id)
    ids, result = groups.submit(ctx, built, group_id, plan.name, "pipeline")
    return group_id, plan.name, list(zip((s.name for s in plan.stages), ids)), result, built
