"""Which ended jobs' records queued or running work still needs: the one rule of
``qex clean`` (and of anything else that removes records): ``still_needed``.

A record is needed while an active job (queued, starting or running) of any
member of the state directory

- ``--needs`` it: its state decides whether that job runs (a record that is
  gone reads "no such job", and the job would be skipped);
- runs ``--after`` it: the job waits for it to end, and reads its state;
- shares its group: the group's handle (``qex wait G``, ``qex status G``)
  reports the code of the first member that did not succeed, so a member's
  record stays while its group still has work to do.

Pure: it decides on index entries and the groups of the candidates; the
caller reads them (under the state lock, so that nothing starts needing a
record between the decision and the removal).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping


def still_needed(active: Iterable[tuple[str, dict]], ended: Mapping[str, str | None]) -> dict[str, dict]:
    """For each ended job of ``ended`` (id -> the id of its group, or None) that an active
    job (``active``: (id, index entry) pairs) still needs: ``{"why": words, "needed_by": id}``,
    the first active job in the order given that needs it."""
    from qex.base.units import safe_text

    kept: dict[str, dict] = {}
    groups: dict[str, list[str]] = {}
    for member, group in ended.items():
        if group:
            groups.setdefault(group, []).append(member)
    for job_id, entry in active:
        state = entry.get("state") or "active"
        who = f"{safe_text(state)} job {job_id[:8]}"
        for dep in entry.get("needs") or ():
            if dep in ended and dep not in kept:
                kept[dep] = {
                    "why": f"{who} needs it (--needs): without it that job would be skipped",
                    "needed_by": job_id,
                }
        for dep in entry.get("after") or ():
            if dep in ended and dep not in kept:
                kept[dep] = {"why": f"{who} runs after it (--after)", "needed_by": job_id}
        group = entry.get("group")
        if group and group in groups:
            name = entry.get("group_name") or group[:8]
            for member in groups.pop(group):  # (the first active member names the reason)
                if member not in kept:
                    kept[member] = {
                        "why": f"its group {safe_text(name, 60)} still has {who}, and the group's "
                        "handle (qex wait, qex status) reports its members' codes",
                        "needed_by": job_id,
                    }
    return kept
