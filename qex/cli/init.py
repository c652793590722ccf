"""qex init --shared DIR [--group G]: make a state directory several users share."""

from __future__ import annotations

from qex.base import say
from qex.cli.common import out

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from argparse import Namespace


def cmd_init(args: Namespace) -> int:
    from qex.users.shared import init_shared

    done = init_shared(args.shared, args.group)
    if args.json:  # qex schema init
        from qex.cli.common import print_json

        print_json(
            {
                "path": done["path"],
                "group": done["group"],
                "created": done["created"],
                "warnings": list(done["warnings"]),
            }
        )
        return 0
    verb = "made" if done["created"] else "set up"
    out(f"{verb} {done['path']}: a state directory shared by the group {done['group']}")
    out(f"each member uses it with: export QEX_STATE_DIR={done['path']}")
    out("give every member the same config (QEX_CONFIG) so that all compute one budget")
    for warning in done["warnings"]:
        say.warning(warning)
    return 0
