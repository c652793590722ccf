"""The pure parts of fan-out and pipelines: the template, the lines, the order of stages."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qex.base import units
from qex.base.errors import SpecError
from qex.jobs import fanout, pipeline
from qex.jobs.jobfile import JobFile

LINE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\0"), min_size=1)
PLAIN = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="{}"), max_size=8)


@settings(max_examples=300)
@given(line=LINE, before=PLAIN, after=PLAIN, rest=st.lists(PLAIN, max_size=3))
def test_the_line_is_one_verbatim_argument_wherever_the_hole_is(line, before, after, rest):
    argv = ["prog", before + "{}" + after, *rest, "{{}}"]
    command = fanout.fill(fanout.parse_template(argv), line)
    assert len(command) == len(argv)
    assert command[1] == before + line + after
    assert command[2:-1] == rest
    assert command[-1] == "{}"


def test_each_hole_takes_the_line_doubled_braces_become_literal_ones_and_no_hole_is_refused():
    t = fanout.parse_template(["{}", "a{}b{}c", "{{}}x{}", "{{}}"])
    assert fanout.fill(t, "L") == ["L", "aLbLc", "{}xL", "{}"]
    with pytest.raises(SpecError, match="no {}"):
        fanout.parse_template(["echo", "{{}}", "x"])


@settings(max_examples=200)
@given(lines=st.lists(LINE, max_size=20), crlf=st.booleans(), final_newline=st.booleans())
def test_split_lines_keeps_every_usable_line_in_order(lines, crlf, final_newline):
    end = "\r\n" if crlf else "\n"
    data = (end.join(lines) + (end if final_newline and lines else "")).encode()
    got = fanout.split_lines(data, "f")
    expected = [(i, s.strip()) for i, s in enumerate(lines, 1) if s.strip() and not s.strip().startswith("#")]
    assert list(got.items) == expected
    assert got.empty + got.comments + len(got.items) == len(lines)


def test_a_non_utf8_line_is_named():
    with pytest.raises(SpecError, match="line 2 is not UTF-8"):
        fanout.split_lines(b"ok\nbad \xff\nok\n", "f")


@given(prog=st.text(max_size=30), line=LINE, position=st.integers(1, 99999))
def test_job_names_are_safe_and_ordered(prog, line, position):
    name = fanout.job_name(prog or "x", position, 5, line)
    units.check_name(name, "name")
    assert f"-{position:05d}" in name or name.startswith(f"{position:05d}")


def stages(deps: dict[str, list[str]]) -> pipeline.PipelineFile:
    return pipeline.PipelineFile(jobs=[JobFile(command=["true"], name=n, needs=d) for n, d in deps.items()])


@settings(max_examples=200)
@given(st.data())
def test_the_order_puts_every_stage_after_what_it_names(data):
    n = data.draw(st.integers(1, 8))
    names = [f"s{i}" for i in range(n)]
    order = data.draw(st.permutations(names))
    # an acyclic graph: each stage may need only stages earlier in a hidden order
    deps = {
        name: data.draw(st.lists(st.sampled_from(order[:i]), unique=True)) if i else [] for i, name in enumerate(order)
    }
    shuffled = dict(sorted(deps.items()))
    plan = pipeline.check(stages(shuffled), "p.toml")
    placed = [s.name for s in plan.stages]
    assert sorted(placed) == sorted(names)
    for name, needs in deps.items():
        assert all(placed.index(d) < placed.index(name) for d in needs)


@settings(max_examples=100)
@given(n=st.integers(2, 6))
def test_a_cycle_is_refused_and_shown(n):
    deps = {f"s{i}": [f"s{(i + 1) % n}"] for i in range(n)}
    with pytest.raises(SpecError, match="circle") as info:
        pipeline.check(stages(deps), "p.toml")
    assert " -> " in str(info.value)


def test_a_fan_out_line_built_like_the_first_is_what_build_would_make_of_it(tmp_path, monkeypatch):
    """``build_like`` takes from the first line what does not depend on the command:
    its record and spec are ``build``'s, but for the job's own id and submission time."""
    import os

    from qex.config.context import Context
    from qex.config.model import Config
    from qex.jobs.request import Request
    from qex.jobs.submit import build, build_like
    from qex.store.state import Store

    store = Store(str(tmp_path / "state"))
    store.ensure()
    ctx = Context(
        store=store,
        config=Config.default(str(tmp_path / "none.toml")),
        uid=os.getuid(),
        user="tester",
        cores=8,
        mem_total=16 << 30,
    )
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    base = Request(
        command=["echo", "{}"],
        cpu="2",
        mem="1GB",
        tags=["t"],
        timeout="1h",
        retries=2,
        env=["K=V"],
        group="g-1",
        group_name="g",
        template=["echo", "{}"],
        origin="each-line",
    )
    first = build(ctx, base.evolve(command=["echo", "a"], name="echo-1-a"))
    found = set()
    for command, name in ((["echo", "b c"], "echo-2-b_c"), ([str(script), "x"], "run.sh-3-x"), (["true"], "true-4")):
        like = build_like(first, command, name, found)
        plain = build(ctx, base.evolve(command=command, name=name))
        assert like.record.evolve(id="", submitted_at=0) == plain.record.evolve(id="", submitted_at=0)
        assert like.spec.evolve(id="") == plain.spec.evolve(id="")
        assert like.spec.id == like.record.id != first.spec.id
    with pytest.raises(SpecError, match="not on the job's PATH"):
        build_like(first, ["no-such-program-qex"], "x", found)
    with pytest.raises(SpecError, match="--name"):
        build_like(first, ["echo"], "bad name!", found)
