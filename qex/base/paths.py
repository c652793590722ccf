"""Where things live: the state directory, the config file, the peer directory.

Read from the environment on every call (tests and users change it between
commands); no I/O beyond what ``os.environ`` holds.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # (typing itself is not imported: start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping


def state_dir(env: Mapping[str, str] = os.environ) -> str:
    explicit = env.get("QEX_STATE_DIR")
    if explicit:
        return os.path.abspath(explicit)
    base = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "qex")


def config_path(env: Mapping[str, str] = os.environ) -> str:
    explicit = env.get("QEX_CONFIG")
    if explicit:
        return os.path.abspath(explicit)
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "qex.toml")


def user_name(uid: int | None = None) -> str:
    """The login name of ``uid`` (this process by default); the number if unknown."""
    uid = os.getuid() if uid is None else uid
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        return str(uid)
