"""One rule, one place: each rule that lived in several places, and disagreed,
decided in one now (docs/design.md, "Where each rule lives"). Each test here
fails on the code as it was before the rule got its home."""

import ast
import pathlib

import pytest

from qex.admit import words
from qex.base import names, states, units
from qex.base.text import one_line, plain
from qex.cli.render import list_row

QEX = pathlib.Path(__file__).resolve().parent.parent / "qex"


# ---- a pool's or a lock's name ---------------------------------------------------------

NAMES = {
    "gpu": True,
    "db_main": True,
    "L1-2": True,
    "a" * 64: True,
    "a" * 65: False,
    "a.b": False,
    "gpü": False,
    "-x": True,
    "cpu": False,
    "MEM": False,
    "": False,
    "two words": False,
}


@pytest.mark.parametrize("name,valid", sorted(NAMES.items()))
def test_one_rule_decides_a_pool_or_lock_name(name, valid):
    assert names.is_pool_name(name) is valid


@pytest.mark.parametrize("name", ["a.b", "gpü", "a" * 65])
def test_submit_refuses_a_lock_name_no_config_could_declare(q, name):
    proc = q.run("submit", "--lock", name, "--", "true")
    assert proc.returncode == 121, (proc.returncode, proc.stderr)
    assert "--lock" in proc.stderr and names.RULE in proc.stderr
    assert q.records() == []


def test_submit_and_pause_take_the_same_lock_names(q):
    q.write_config("[budget]\ncpu = 2\n")
    assert q.run("pause", "lock", "a.b").returncode != 0
    assert q.run("pause", "lock", "db_main").returncode == 0
    job = q.submit("--lock", "db_main", "--", "true")
    assert q.record(job)["state"] == "queued"  # the lock it claims is paused
    assert q.run("resume", "lock", "db_main").returncode == 0
    q.wait_state(job, "completed")


def test_a_config_pool_name_follows_the_same_rule(q):
    q.write_config('[[pool]]\nname = "gpu-a"\ncount = 1\n')
    assert q.run("config", "show").returncode == 0
    for bad in ("a.b", "cpu"):
        q.write_config(f'[[pool]]\nname = "{bad}"\ncount = 1\n')
        proc = q.run("config", "show")
        assert proc.returncode != 0 and "pool" in proc.stderr, proc.stderr


# ---- sizes and cores in words ----------------------------------------------------------


@pytest.mark.parametrize("n", [0, 100, 1023, 1024, 1536, 1_342_177_280, 5 << 30, 1_288_490_188, -(3 << 20)])
def test_a_size_reads_the_same_in_a_reason_and_in_a_record(n):
    assert words.size(n) == units.format_size(n)


@pytest.mark.parametrize("milli", [0, 250, 1000, 1500, 2000, 12345, -1500])
def test_cores_read_the_same_in_a_reason_and_in_a_record(milli):
    assert words.cores(milli).split()[0] == units.format_cores(milli)


# ---- text made safe for a terminal --------------------------------------------------------

UNSAFE = ["\x1b[31m", "\n", "\r", "\x7f", "\x9b", "\x85", "\u202e", "\u2066"]


@pytest.mark.parametrize("bad", UNSAFE)
def test_a_hook_environment_and_a_sentence_carry_no_terminal_control(bad):
    from qex.hooks.runner import hook_env
    from qex.store.records import Status, load

    rec = {"id": "j", "seq": 1, "command": ["x"], "owner": "me", "uid": 0, "tags": [f"x{bad}y"], "cwd": f"/tmp/{bad}"}
    env = hook_env(load(Status, {**rec, "state": "completed"}), "/tmp")
    for value in (env["QEX_TAGS"], env["QEX_CWD"], plain(f"a{bad}b"), one_line(f"a{bad}b")):
        assert bad not in value and not any(0x80 <= ord(c) < 0xA0 for c in value), repr(value)


def test_a_config_error_echoes_the_file_by_the_same_rule(q):
    """Letters as written, an escape sequence never: the old ASCII-only echo made
    '75ü' read '75?' (and a control character '?' too)."""
    q.write_config('[budget]\ncpu = "75\u00fc\\u001b[31m"\n')
    proc = q.run("config", "show")
    assert proc.returncode != 0
    assert "75ü?[31m" in proc.stderr and "\x1b" not in proc.stderr, proc.stderr


def test_plain_keeps_words_and_punctuation():
    assert (
        plain("waits for 2 cores (job ab12cd34: «train»), 1.5GB free")
        == "waits for 2 cores (job ab12cd34: «train»), 1.5GB free"
    )


# ---- the state sets ------------------------------------------------------------------------


@pytest.mark.parametrize("state", states.FINAL)
def test_list_shows_the_code_of_a_job_in_every_ended_state(state):
    from qex.store.records import Row, load

    line = {"id": "0123456789", "state": state, "name": "n", "submitted_at": 1.0, "claims": {"cpu": 1, "mem": 0}}
    row = list_row(load(Row, line), now=2.0)
    assert " exit " in row, row


def _state_literals(tree) -> list[int]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
            if (
                all(isinstance(e, ast.Constant) and e.value in states.STATES for e in node.elts)
                and len({e.value for e in node.elts}) >= 2
            ):  # (("timeout", "timeout"): an option)
                found.append(node.lineno)
    return found


def test_no_module_spells_out_a_set_of_states_but_their_home():
    spelled = {}
    for path in QEX.rglob("*.py"):
        if path.relative_to(QEX).as_posix() == "base/states.py":
            continue
        lines = _state_literals(ast.parse(path.read_text()))
        if lines:
            spelled[path.relative_to(QEX).as_posix()] = lines
    assert spelled == {}


def test_the_spelled_sets_check_sees_a_literal():
    assert _state_literals(ast.parse('x = ("starting", "running")')) == [1]


# ---- is a state directory shared ----------------------------------------------------------


def test_only_the_layout_decides_whether_a_directory_is_shared():
    deciding = sorted(p.relative_to(QEX).as_posix() for p in QEX.rglob("*.py") if "S_ISGID" in p.read_text())
    assert deciding == ["store/layout.py"]


# ---- the names in a state directory --------------------------------------------------------


def _word(name: str) -> bool:
    """ "lock", "jobs", "pid", "pause"...: also a record's keys, a pause's kinds."""
    return name.isascii() and name.isalpha() and name.islower()


def _template(node: ast.JoinedStr, consts: dict) -> str:
    """An f-string with each variable part as ``{}`` (a module-level constant of ``consts``: its value)."""
    parts = []
    for v in node.values:
        if isinstance(v, ast.Constant):
            parts.append(str(v.value))
        elif isinstance(v.value, ast.Name) and v.value.id in consts:
            parts.append(consts[v.value.id])
        else:
            parts.append("{}")
    return "".join(parts)


def _layout_names() -> set[str]:
    """Every name store/layout.py gives: its module-level strings, and its f-strings (a name with
    a variable part, ``waker-{}.lock``) that hold a letter besides the variable parts."""
    tree = ast.parse((QEX / "store" / "layout.py").read_text())
    consts = {
        t.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    names = set(consts.values())
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            template = _template(node, consts)
            if any(c.isalpha() for c in template.replace("{}", "")):
                names.add(template)
    return names


def _docstrings(tree) -> set[int]:
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def _name_literals(tree, names: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of each state-directory name spelled out: a string constant equal to a
    name (or whose last path part is one, ``"/status.json"``), an f-string whose shape is a
    name's. A name that is a plain word counts only where a path is joined (``os.path.join``,
    ``store.path``) or a module-level constant is set to it (``NAME = "pid"``): elsewhere it
    is a record's key or a kind, not the file."""
    skip = _docstrings(tree)
    in_path = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) in ("join", "path") or getattr(node.func, "id", None) == "join")
        for arg in node.args
    }
    in_path |= {id(node.value) for node in tree.body if isinstance(node, ast.Assign)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _template(node, {}) in names:
            found.append((node.lineno, _template(node, {})))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            for value in {node.value, node.value.rsplit("/", 1)[-1]}:
                if value in names and (id(node) in in_path or not _word(value)):
                    found.append((node.lineno, value))
    return sorted(found)


def test_only_the_layout_spells_a_name_in_the_state_directory():
    names = _layout_names()
    spelled = {}
    for path in sorted(QEX.rglob("*.py")):
        if path.relative_to(QEX).as_posix() == "store/layout.py":
            continue
        found = _name_literals(ast.parse(path.read_text()), names)
        if found:
            spelled[path.relative_to(QEX).as_posix()] = found
    assert spelled == {}


def test_the_names_check_sees_a_literal():
    names = _layout_names()
    assert {"alive.lock", "status.json", "lock", "pid", "waker-{}.lock", "lock-{}.json", ".cut"} <= names
    code = (
        '"""status.json, alive.lock: a docstring."""\n'
        'a = os.path.join(root, "lock")\n'
        'b = store.path(job_id, "status.json")\n'
        'c = f"waker-{uid}.lock"\n'
        'd = rec["pid"] or rec.get("lock")\n'
        'e = f"{jobs}/{job_id}/status.json"\n'
        'f = path + ".cut"\n'
        'NAME = "pid"\n'
    )
    assert _name_literals(ast.parse(code), names) == [
        (2, "lock"),
        (3, "status.json"),
        (4, "waker-{}.lock"),
        (6, "status.json"),
        (7, ".cut"),
        (8, "pid"),
    ]


# ---- a number read back from a file ---------------------------------------------------------

NUMBER_HOME = "base/numbers.py"
SHOWS_A_NUMBER = {("base/units.py", "format_duration")}  # words for a number; it reads none


def _infinite(node) -> bool:
    """``float("inf")``, ``float("-nan")``...: a value no finite number equals."""
    return (
        isinstance(node, ast.Call)
        and getattr(node.func, "id", None) == "float"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.strip().lstrip("+-").lower() in ("inf", "infinity", "nan")
    )


def _number_checks(tree) -> list[int]:
    """Lines that decide by themselves whether a number is finite: math.isfinite/isnan/isinf
    (or their names imported), math.inf, a comparison with float("inf") or float("nan"),
    ``x != x`` or ``x == x`` (NaN), ``x - x`` (zero but for NaN and the infinities). A
    sentinel (``FOREVER = float("inf")``) decides nothing."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in ("isfinite", "isnan", "isinf", "inf", "nan"):
            found.append(node.lineno)
        elif isinstance(node, ast.Name) and node.id in ("isfinite", "isnan", "isinf"):
            found.append(node.lineno)
        elif isinstance(node, ast.Compare) and any(
            _infinite(n) for part in [node.left, *node.comparators] for n in ast.walk(part)
        ):
            found.append(node.lineno)
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.Eq, ast.NotEq))
            and ast.dump(node.left) == ast.dump(node.comparators[0])
        ):
            found.append(node.lineno)
        elif (
            isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub) and ast.dump(node.left) == ast.dump(node.right)
        ):
            found.append(node.lineno)
    return sorted(found)


def _lines_of(tree, functions: set[str]) -> set[int]:
    return {
        line
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in functions
        for line in range(node.lineno, node.end_lineno + 1)
    }


def test_only_the_number_check_decides_whether_a_number_read_is_finite():
    """Every number read (a record, the index, the journal, a peer record, a pause, learn.json,
    the config) is held to its bounds by qex/base/numbers.py: no other module checks one itself."""
    spelled = {}
    for path in sorted(QEX.rglob("*.py")):
        rel = path.relative_to(QEX).as_posix()
        if rel == NUMBER_HOME:
            continue
        tree = ast.parse(path.read_text())
        allowed = _lines_of(tree, {f for m, f in SHOWS_A_NUMBER if m == rel})
        found = [line for line in _number_checks(tree) if line not in allowed]
        if found:
            spelled[rel] = found
    assert spelled == {}


def test_the_number_checks_check_sees_each_spelling():
    code = (
        "import math\n"
        "a = math.isfinite(v)\n"
        "b = v != v\n"
        "c = v - v == 0\n"
        "d = v in (float('inf'), float('-inf'))\n"
        "e = x < math.inf\n"
        "f = isnan(v)\n"
        "g = a != b\n"
        "FOREVER = float('inf')\n"
    )
    assert _number_checks(ast.parse(code)) == [2, 3, 4, 5, 6, 7]
