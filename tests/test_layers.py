"""The package's layers: each folder of qex/ imports only the folders below it.

Every import statement counts, those inside functions included (qex imports
lazily for its start-up time, and a lazy import is still an edge). The map
below is the one in docs/design.md; a change to it is a change of design.
"""

import ast
import os
import pathlib

import pytest

QEX = pathlib.Path(__file__).resolve().parent.parent / "qex"

# Bottom first. Folders in one tuple are side by side: neither imports the other.
LAYERS = (
    ("base",),  # leaf: errors, units, text, ids, paths, states, machine facts, records' base
    ("admit", "store"),  # pure admission; the state directory on disk
    ("linux",),  # the kernel's mechanisms: cgroups, processes
    ("config",),  # the config file and its cache; a process's Context
    ("hooks", "users", "slurm"),  # the stop hook; several users (peers, shared directories); Slurm's clients
    ("queue",),  # the pass and its actors: engine, pause, queue view, waker
    ("jobs",),  # submission: requests, job files, fan-out, pipelines, groups, names
    ("supervisor",),  # a job's supervisor, and what a process does after a pass
    ("control",),  # kill, cancel, clean, rerun
    ("cli", "api"),  # the command line: parse, call, print; the Python API (qex.submit, qex.Executor)
)
TOP = ("__init__", "__main__")  # the modules directly in qex/: __main__ imports the command line
MAX_TOP_MODULES = 10
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
# What admit/ may import: no clock, no file, no process (pure: a snapshot in, a plan out).
PURE_IMPORTS = {"__future__", "operator", "gc", "re", "typing", "math", "itertools", "functools", "dataclasses"}


def rank_of(layers=LAYERS) -> dict[str, int]:
    return {folder: i for i, names in enumerate(layers) for folder in names}


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(root: pathlib.Path, path: pathlib.Path, modules: set[str]) -> list[tuple[str, int]]:
    """(module imported, line) for every import statement of a file, at any depth."""
    name = module_name(root, path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.append((target if target in modules else base, node.lineno))
    return [(m, line) for m, line in found if m.split(".")[0] == root.name]


def graph(root: pathlib.Path) -> dict[str, list[tuple[str, int]]]:
    files = sorted(root.rglob("*.py"))
    modules = {module_name(root, p) for p in files}
    edges = {}
    for p in files:
        name = module_name(root, p)
        edges[name] = sorted({(m, line) for m, line in imports_of(root, p, modules) if m != name and m in modules})
    return edges


def folder_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] not in TOP) else ""


def upward_edges(root: pathlib.Path, layers=LAYERS) -> list[str]:
    """Every import of a folder at its own layer or above (another folder), as sentences."""
    rank, bad = rank_of(layers), []
    top = len(layers)
    for module, targets in graph(root).items():
        src = folder_of(module)
        src_rank = rank.get(src, top) if src else top
        for target, line in targets:
            dst = folder_of(target)
            if dst == src or (not dst and target == root.name):
                continue
            if dst not in rank or rank[dst] >= src_rank:
                bad.append(
                    f"{module} (line {line}) imports {target}: {dst or 'the top'} is not below {src or 'the top'}"
                )
    return bad


def cycles(root: pathlib.Path) -> list[list[str]]:
    """Each import cycle between modules, as the chain that closes it."""
    edges = {m: [t for t, _ in ts] for m, ts in graph(root).items()}
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    return found


# ---- the package as it is ------------------------------------------------------------


def test_no_folder_imports_one_at_its_layer_or_above():
    assert upward_edges(QEX) == []


def test_no_module_imports_itself_back():
    assert [" -> ".join(c) for c in cycles(QEX)] == []


def test_every_folder_has_its_layer_and_the_top_is_small():
    folders = sorted(p.name for p in QEX.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert [f for f in folders if f not in rank_of()] == []
    top = sorted(p.stem for p in QEX.glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_admission_imports_nothing_that_reaches_the_machine():
    for path in (QEX / "admit").glob("*.py"):
        for target, line in imports_of(QEX, path, set()):
            assert folder_of(target) in ("admit", "base"), f"{path.name}:{line} imports {target}"
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module] if isinstance(node, ast.ImportFrom) and not node.level and node.module else [])
            )
            for name in names:
                if not name.startswith("qex"):
                    assert name.split(".")[0] in PURE_IMPORTS, f"admit/{path.name}:{node.lineno} imports {name}"


# ---- a library one command needs is imported by that command only -----------------------------

# library -> the only modules that may import it (their command's module: qex/cli/ loads one per
# command, qex/cli/__init__.py). curses: `qex top`'s screen (~2 ms; docs/design.md, "Start-up").
# cloudpickle: a Python call's travel (qex.api.calls, and the job's side, qex.api.runner).
ONLY_IN = {
    "curses": {"cli/top.py"},
    "_curses": set(),
    "textual": set(),
    "rich": set(),
    "cloudpickle": {"api/calls.py", "api/runner.py"},
}


def third_party_imports(path: pathlib.Path) -> list[tuple[str, int]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.append((node.module.split(".")[0], node.lineno))
    return found


def test_the_screen_library_is_imported_by_qex_top_only():
    bad = []
    for path in QEX.rglob("*.py"):
        rel = str(path.relative_to(QEX))
        for name, line in third_party_imports(path):
            if name in ONLY_IN and rel not in ONLY_IN[name]:
                bad.append(f"{rel}:{line} imports {name}")
    assert bad == []
    importers = [m for m, targets in graph(QEX).items() for t, _ in targets if t == "qex.cli.top"]
    assert importers == [], "only the command line's dispatch (by name: parser.COMMANDS) loads qex.cli.top"
    from qex.cli import parser

    assert parser.COMMANDS["top"][1] == "qex.cli.top:cmd_top"


# ---- size: no module grows past its bound, and those past it today only shrink ---------------

# A module or function past its bound, with its length: it may only shrink. None is
# left; one that must stay longer for a measured reason is listed here, with it.
LONG_MODULES: dict[str, int] = {}
LONG_FUNCTIONS: dict[str, int] = {}


def test_no_module_is_longer_than_the_bound_or_than_it_was():
    over = {}
    for path in QEX.rglob("*.py"):
        rel = str(path.relative_to(QEX))
        n = len(path.read_text().splitlines())
        if n > LONG_MODULES.get(rel, MAX_MODULE_LINES):
            over[rel] = n
    assert over == {}


def test_no_function_is_longer_than_the_bound_or_than_it_was():
    over = {}
    for path in QEX.rglob("*.py"):
        rel = str(path.relative_to(QEX))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > LONG_FUNCTIONS.get(f"{rel}:{node.name}", MAX_FUNCTION_LINES):
                    over[f"{rel}:{node.name}"] = n
    assert over == {}


# ---- the checks themselves see what they must (each fails on a package made to break it) ----


def make_package(tmp_path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "qex"
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if not init.exists():
                init.write_text("")
    return root


@pytest.mark.parametrize(
    "statement",
    [
        "from qex.cli import common",
        "from qex.cli.common import x",
        "import qex.cli.common",
        "from ..cli import common",
        "def f():\n    from qex.cli import common\n",
        "class C:\n    def m(self):\n        if True:\n            import qex.cli.common\n",
    ],
)
def test_an_upward_import_is_found_wherever_it_is_written(tmp_path, statement):
    root = make_package(tmp_path, {"queue/engine.py": statement + "\n", "cli/common.py": "x = 1\n"})
    found = upward_edges(root)
    assert len(found) == 1 and "qex.queue.engine" in found[0] and "qex.cli" in found[0], found


def test_a_side_by_side_import_is_upward_too(tmp_path):
    root = make_package(tmp_path, {"store/state.py": "from qex.admit import model\n", "admit/model.py": ""})
    assert upward_edges(root) != []


def test_a_downward_import_passes(tmp_path):
    root = make_package(
        tmp_path,
        {
            "cli/show.py": "def f():\n    from qex.queue import engine\n",
            "queue/engine.py": "from qex.base import errors\n",
            "base/errors.py": "",
        },
    )
    assert upward_edges(root) == []


def test_a_cycle_inside_one_folder_is_named_by_its_chain(tmp_path):
    root = make_package(
        tmp_path,
        {
            "store/a.py": "def f():\n    from qex.store import b\n",
            "store/b.py": "from . import c\n",
            "store/c.py": "import qex.store.a\n",
        },
    )
    assert [" -> ".join(c) for c in cycles(root)] == ["qex.store.a -> qex.store.b -> qex.store.c -> qex.store.a"]


def test_the_real_package_is_what_the_checks_walk():
    """The walk sees the package's lazy imports (engine imports the supervisor's
    code only inside a function, for instance): an empty graph would pass."""
    edges = graph(QEX)
    assert len(edges) > 60
    lazy = [t for t, _ in edges["qex.cli.show"]]
    assert any(t.startswith("qex.queue") for t in lazy), lazy


if __name__ == "__main__":  # python tests/test_layers.py: the graph between the folders, for a reader
    counts: dict[tuple[str, str], int] = {}
    for module, targets in graph(QEX).items():
        for target, _ in targets:
            a, b = folder_of(module) or "(top)", folder_of(target) or "(top)"
            if a != b:
                counts[a, b] = counts.get((a, b), 0) + 1
    for (a, b), n in sorted(counts.items(), key=lambda kv: (-rank_of().get(kv[0][0], 99), kv[0])):
        print(f"{a:>10} -> {b:<10} {n}")
    for path in sorted(QEX.rglob("*.py")):
        print(f"{len(path.read_text().splitlines()):6d}  {os.path.relpath(path, QEX.parent)}")


def test_every_public_function_says_the_types_of_its_arguments_and_result():
    """Type hints on every function whose name has no leading underscore (methods and
    nested functions too; ``self`` and ``cls`` excepted): a reader knows what goes in."""
    untyped = []
    for path in QEX.rglob("*.py"):
        rel = str(path.relative_to(QEX))
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
                continue
            a = node.args
            args = [x for x in a.posonlyargs + a.args + a.kwonlyargs if x.arg not in ("self", "cls")]
            args += [x for x in (a.vararg, a.kwarg) if x is not None]
            if node.returns is None or any(x.annotation is None for x in args):
                untyped.append(f"{rel}:{node.lineno}:{node.name}")
    assert untyped == []
