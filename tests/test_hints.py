"""Every public function and method of qex/ is annotated: each parameter (but
``self`` and ``cls``) and its return.

Public: a name that does not start with ``_``, defined at a module's top or in
a class (a class inside a class too); a function defined inside another
function's body is that function's own business. Names needed only in
annotations are imported under ``TYPE_CHECKING`` (see qex/store/state.py), and
those imports go downward too: tests/test_layers.py counts them.
"""

import ast
import pathlib

QEX = pathlib.Path(__file__).resolve().parent.parent / "qex"


def _unannotated(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> list[str]:
    args = fn.args
    positional = args.posonlyargs + args.args
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    bound = in_class and not static and positional and positional[0].arg in ("self", "cls")
    skip = positional[0].arg if bound else None
    params = positional + [args.vararg] + args.kwonlyargs + [args.kwarg]  # in the signature's order
    params = [a for a in params if a is not None]
    return [a.arg for a in params if a.annotation is None and a.arg != skip]


def missing_hints(source: str, where: str = "<source>") -> list[str]:
    """One sentence per public function or method whose signature lacks a hint."""
    found = []

    def visit(node: ast.AST, prefix: str, in_class: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", True)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.name.startswith("_"):
                    continue
                lacks = [f"parameter {name}" for name in _unannotated(child, in_class)]
                if child.returns is None:
                    lacks.append("the return")
                if lacks:
                    found.append(f"{where}:{child.lineno} {prefix}{child.name}: no hint for {', '.join(lacks)}")
            else:
                visit(child, prefix, in_class)  # a def under an if or a try at a module's or a class's top

    visit(ast.parse(source, where), "", False)
    return found


def test_every_public_function_of_qex_is_annotated():
    found = []
    for path in sorted(QEX.rglob("*.py")):
        found += missing_hints(path.read_text(), str(path.relative_to(QEX.parent)))
    assert found == [], f"{len(found)} public functions lack hints:\n" + "\n".join(found)


def test_the_walk_sees_the_package():
    """An empty walk would pass: it must see qex's functions, ctx included."""
    seen = 0
    for path in QEX.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                seen += 1
    assert seen > 300
    stripped = (QEX / "queue" / "engine.py").read_text().replace("ctx: Context", "ctx")
    assert any("run_pass: no hint for parameter ctx" in s for s in missing_hints(stripped))


# ---- the check itself finds what it must, in sources built here -------------------------------


def test_a_parameter_without_a_hint_is_named():
    source = "def submit(ctx, req: dict) -> str:\n    return ''\n"
    assert missing_hints(source, "m.py") == ["m.py:1 submit: no hint for parameter ctx"]


def test_a_missing_return_is_named():
    assert missing_hints("def f(a: int):\n    pass\n") == ["<source>:1 f: no hint for the return"]


def test_every_kind_of_parameter_counts():
    source = "def f(a: int, /, b: int, *args, c: int, d=1, **kw) -> None:\n    pass\n"
    assert missing_hints(source) == ["<source>:1 f: no hint for parameter args, parameter d, parameter kw"]


def test_methods_count_but_self_and_cls_need_no_hint():
    source = (
        "class A:\n"
        "    def ok(self, x: int) -> int:\n        return x\n"
        "    @classmethod\n"
        "    def make(cls, y) -> 'A':\n        return cls()\n"
        "    @staticmethod\n"
        "    def self_here(self) -> None:\n        pass\n"
        "    class Inner:\n"
        "        def deep(self):\n            pass\n"
    )
    assert missing_hints(source) == [
        "<source>:5 A.make: no hint for parameter y",
        "<source>:8 A.self_here: no hint for parameter self",
        "<source>:11 A.Inner.deep: no hint for the return",
    ]


def test_private_names_and_local_functions_are_left_alone():
    source = (
        "def _helper(x):\n    pass\n"
        "class _Hidden:\n    def __init__(self, a):\n        pass\n"
        "def outer() -> None:\n    def inner(y):\n        pass\n"
    )
    assert missing_hints(source) == []


def test_a_function_under_an_if_at_the_top_counts():
    source = "import os\nif os.name == 'posix':\n    def f(x) -> None:\n        pass\n"
    assert missing_hints(source) == ["<source>:3 f: no hint for parameter x"]


def test_a_fully_annotated_function_passes():
    assert missing_hints("async def f(a: int, *b: str, **c: object) -> None:\n    pass\n") == []
