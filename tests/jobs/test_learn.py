"""The learner (qex/jobs/learn.py) on real files in tmp_path."""

import json
import os

import pytest

from qex.jobs import learn

MiB = 1 << 20
CMD = ["python", "train.py", "--epochs", "3"]


def teach(state, kind, nbytes, command=CMD, template=None, now=None):
    return learn.teach_locked(str(state), [(command, template, kind, nbytes, "train")], now=now)


def test_nothing_known_gives_no_claim(tmp_path):
    assert learn.claim_for(str(tmp_path), CMD, None, 0.2) == (None, None)


def test_the_learned_claim_is_the_largest_peak_plus_the_margin(tmp_path):
    for peak in (300 * MiB, 500 * MiB, 400 * MiB):
        teach(tmp_path, "peak", peak)
    (claim, words), warning = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert warning is None
    assert claim == 600 * MiB
    assert words == "learned from 3 runs (peak 500MB)"


def test_only_the_last_samples_count(tmp_path):
    teach(tmp_path, "peak", 4000 * MiB)
    for _ in range(learn.SAMPLES):
        teach(tmp_path, "peak", 200 * MiB)
    (claim, _), _ = learn.claim_for(str(tmp_path), CMD, None, 0.0)
    assert claim == 200 * MiB


def test_an_oom_floor_is_at_least_double_the_claim_that_was_too_small(tmp_path):
    teach(tmp_path, "peak", 100 * MiB)
    teach(tmp_path, "floor", 2 * 300 * MiB)
    (claim, words), _ = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert claim == 600 * MiB
    assert "at least 600MB after an out-of-memory kill" in words


def test_a_floor_alone_still_gives_a_claim(tmp_path):
    teach(tmp_path, "floor", 800 * MiB)
    (claim, words), _ = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert claim == 800 * MiB
    assert words.startswith("learned: at least 800MB")


def test_a_tiny_peak_never_gives_a_tiny_or_zero_claim(tmp_path):
    teach(tmp_path, "peak", 3 * MiB)
    (claim, _), _ = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert claim == learn.MIN_CLAIM
    found, _ = learn.claim_for(str(tmp_path), CMD, None, 0.2, minimum=10 * MiB)
    assert found[0] == 10 * MiB, "never more cautious than a smaller default claim"
    teach(tmp_path, "peak", 0, command=["zero"])
    assert learn.claim_for(str(tmp_path), ["zero"], None, 0.2) == (None, None)


def test_commands_and_templates_have_their_own_keys(tmp_path):
    assert learn.key_of(["a b"]) != learn.key_of(["a", "b"])
    template = ["./process", "{}"]
    teach(tmp_path, "peak", 300 * MiB, command=["./process", "a.csv"], template=template)
    found, _ = learn.claim_for(str(tmp_path), ["./process", "b.csv"], template, 0.0)
    assert found[0] == 300 * MiB, "every line of a fan-out reads its template's entry"
    assert learn.claim_for(str(tmp_path), ["./process", "b.csv"], None, 0.0) == (None, None)


def test_the_file_never_holds_the_command(tmp_path):
    teach(tmp_path, "peak", 100 * MiB, command=["deploy", "--token=SECRET123"])
    assert "SECRET123" not in (tmp_path / learn.FILE).read_text()


@pytest.mark.parametrize("content", [b"\x00garbage{", b"[1, 2]", b'{"commands": [1]}', b""])
def test_a_damaged_store_warns_and_is_moved_aside_by_the_next_lesson(tmp_path, content):
    path = tmp_path / learn.FILE
    path.write_bytes(content)
    found, warning = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert found is None and "learner store cannot be used" in warning
    note = teach(tmp_path, "peak", 100 * MiB, now=1000)
    assert "moved it to" in note
    assert (tmp_path / f"{learn.FILE}.corrupt-1000").read_bytes() == content
    (claim, _), warning = learn.claim_for(str(tmp_path), CMD, None, 0.0)
    assert warning is None and claim == 100 * MiB


def test_odd_shapes_inside_a_valid_store_give_no_claim_and_no_crash(tmp_path):
    key = learn.key_of(CMD)
    store = {
        "commands": {
            key: {
                "s": [
                    ["peak", "12GB"],
                    ["peak", True],
                    ["peak", -5],
                    "x",
                    ["peak"],
                    {"kind": "peak", "bytes": 9},
                    ["later-kind", 9],
                ]
            }
        }
    }
    (tmp_path / learn.FILE).write_text(json.dumps(store))
    assert learn.claim_for(str(tmp_path), CMD, None, 0.2) == (None, None)
    teach(tmp_path, "peak", 100 * MiB)
    (claim, words), _ = learn.claim_for(str(tmp_path), CMD, None, 0.0)
    assert claim == 100 * MiB and words == "learned from 1 run (peak 100MB)"


def test_a_directory_in_place_of_the_learn_file_gives_no_claim_and_a_warning(tmp_path):
    os.mkdir(tmp_path / learn.FILE)
    found, warning = learn.claim_for(str(tmp_path), CMD, None, 0.2)
    assert found is None and "cannot read" in warning


def test_the_learn_file_keeps_only_the_newest_max_commands(tmp_path, monkeypatch):
    monkeypatch.setattr(learn, "MAX_COMMANDS", 3)
    for i in range(5):
        teach(tmp_path, "peak", 100 * MiB, command=[f"cmd{i}"], now=1000 + i)
    data = json.loads((tmp_path / learn.FILE).read_text())
    assert len(data["commands"]) == 3
    assert learn.key_of(["cmd4"]) in data["commands"] and learn.key_of(["cmd0"]) not in data["commands"]


def test_reading_the_store_stays_cheap_for_the_submit_path(tmp_path):
    """No OpenSSL (hashlib), no cattrs, no attrs: a submission pays for one small JSON file."""
    import subprocess
    import sys

    teach(tmp_path, "peak", 100 * MiB)
    code = (
        "import sys; from qex.jobs import learn; "
        f"found, _ = learn.claim_for({str(tmp_path)!r}, ['python', 'train.py', '--epochs', '3'], None, 0.2); "
        "assert found, found; "
        "print(sorted(m for m in ('_hashlib', 'hashlib', 'cattrs', 'attrs', 'tomlkit') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
