"""Reading a job's spec.json: the fields of records.Spec, checked."""

import json
import os
import subprocess
import sys

import pytest

from qex.base.errors import BrokenRecord
from qex.store.records import Spec
from qex.store.state import Store


def _store(tmp_path) -> Store:
    store = Store(str(tmp_path / "state"))
    store.ensure()
    return store


def test_a_spec_written_at_submission_reads_back_whole(tmp_path):
    store = _store(tmp_path)
    spec = Spec(
        id="j1", command=("sh", "-c", "echo hi"), cwd="/tmp", env={"A": "1"}, nice=5, hints=True, request={"cpu": "2"}
    )
    store.create_job_dir(spec)
    assert store.read_spec("j1", must_own=True) == spec


@pytest.mark.parametrize(
    "damage, words",
    [
        ({"command": "sh -c true"}, "command is str"),
        ({"command": []}, "command is empty"),
        ({"env": {"A": 1}}, "env holds something other than text"),
        ({"nice": True}, "nice is bool"),
        ({"cwd": None}, "cwd is null"),
    ],
)
def test_a_damaged_spec_is_a_sentence_naming_the_file(tmp_path, damage, words):
    store = _store(tmp_path)
    store.create_job_dir(Spec(id="j1", command=("true",), cwd="/tmp", env={}))
    path = store.path("j1", "spec.json")
    with open(path) as fh:
        data = json.load(fh)
    with open(path, "w") as fh:
        json.dump({**data, **damage}, fh)
    with pytest.raises(BrokenRecord) as exc:
        store.read_spec("j1")
    assert path in str(exc.value) and words in str(exc.value)


def test_a_spec_without_its_command_is_refused(tmp_path):
    store = _store(tmp_path)
    store.create_job_dir(Spec(id="j1", command=("true",), cwd="/tmp", env={}))
    path = store.path("j1", "spec.json")
    with open(path, "w") as fh:
        json.dump({"id": "j1", "cwd": "/tmp", "env": {}}, fh)
    with pytest.raises(BrokenRecord, match="no command"):
        store.read_spec("j1")


def test_reading_a_spec_imports_neither_cattrs_nor_attrs(tmp_path):
    store = _store(tmp_path)
    store.create_job_dir(Spec(id="j1", command=("true",), cwd="/tmp", env={}))
    code = (
        "import sys; from qex.store.state import Store; "
        f"Store({store.root!r}).read_spec('j1', must_own=True); "
        "print(sorted(m for m in ('cattrs', 'attrs', 'attr') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    assert out.stdout.strip() == "[]", out.stdout
