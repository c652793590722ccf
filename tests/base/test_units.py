"""Sizes, durations, cores and names (qex/base/units.py)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qex.base import numbers
from qex.base.errors import SpecError
from qex.base.units import (
    check_name,
    format_cores,
    format_duration,
    format_size,
    parse_cpu,
    parse_duration,
    parse_mem,
    parse_size,
    safe_name,
    safe_text,
)

KiB, MiB, GiB, TiB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(
    "text, expected",
    [
        ("512MB", 512 * MiB),
        ("2GB", 2 * GiB),
        ("1.5GiB", 3 * GiB // 2),
        ("10g", 10 * GiB),
        ("100", 100),
        ("0", 0),
        ("7B", 7),
        ("3 KB", 3 * KiB),
        ("3k", 3 * KiB),
        ("3KiB", 3 * KiB),
        ("1m", MiB),
        ("2 mib", 2 * MiB),
        ("1T", TiB),
        ("1.25tb", 5 * TiB // 4),
        (".5K", 512),
        ("1.", 1),
        ("1.9", 1),  # a fraction of a byte is dropped
        ("0.0001KB", 0),
        (" 4GB ", 4 * GiB),
    ],
)
def test_parse_size_accepts_the_contract_forms(text, expected):
    assert parse_size(text, "--mem") == expected
    assert isinstance(parse_size(text, "--mem"), int)


@pytest.mark.parametrize(
    "text", ["", " ", "lots", "-1", "-5MB", "1e3", "nan", "inf", "5XB", "5 G B", "1..5G", "GB", "1,5G", "٣", "1_000"]
)
def test_parse_size_refuses_with_option_value_and_forms(text):
    with pytest.raises(SpecError) as e:
        parse_size(text, "--vram")
    message = str(e.value)
    assert message.startswith("--vram: ")
    assert "512MB" in message and "GiB" in message
    assert e.value.exit_code == 121


def test_a_bad_size_is_refused_with_one_exact_sentence_naming_option_value_and_forms():
    with pytest.raises(SpecError) as e:
        parse_size("lots", "--mem")
    assert str(e.value) == (
        "--mem: 'lots' is not a size; use a number of bytes or a number with "
        "K, M, G or T (KB/KiB...), e.g. 512MB, 2GB, 1.5GiB"
    )


def test_parse_size_shows_a_hostile_value_safely():
    with pytest.raises(SpecError) as e:
        parse_size("\x1b[2J\u202eevil" + "x" * 500, "--mem")
    message = str(e.value)
    assert "\x1b" not in message and "\u202e" not in message
    assert len(message) < 300


def test_parse_size_refuses_absurd_sizes():
    with pytest.raises(SpecError):
        parse_size("9" * 40, "--mem")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("90s", 90.0),
        ("30m", 1800.0),
        ("4h", 14400.0),
        ("7d", 604800.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        ("10", 10.0),
        ("0", 0.0),
        ("2 H", 7200.0),
        ("1h30m", 5400.0),
        ("2h05m", 7500.0),
        ("3m20s", 200.0),
        ("3d4h", 3 * 86400.0 + 4 * 3600.0),
    ],
)
def test_a_duration_reads_bare_seconds_or_ms_s_m_h_d_units_alone_or_combined(text, expected):
    assert parse_duration(text, "--timeout") == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "x", "-1", "-5s", "1w", "nan", "inf", "1e3", "1h30", "s", "5 m s", "9" * 400])
def test_a_bad_duration_is_refused_naming_the_option_and_an_example(text):
    with pytest.raises(SpecError) as e:
        parse_duration(text, "--timeout")
    assert str(e.value).startswith("--timeout: ")
    assert "90s" in str(e.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("1", 1000),
        ("0.5", 500),
        ("2.25", 2250),
        (".25", 250),
        ("4", 4000),
        ("0.001", 1),
        ("1.500", 1500),
        ("guess", "guess"),
        ("HALF", "half"),
        ("Full", "full"),
        ("max", "max"),
    ],
)
def test_cpu_reads_cores_to_a_thousandth_and_the_words_guess_half_full_max_in_any_case(text, expected):
    assert parse_cpu(text, "--cpu") == expected


@pytest.mark.parametrize("text", ["0", "0.0", "0.0001", "1.2345", "-1", "", "x", "1e2", "nan", "all", "1 core"])
def test_a_cpu_that_is_not_a_positive_number_of_thousandths_is_refused_listing_the_words(text):
    with pytest.raises(SpecError) as e:
        parse_cpu(text, "--cpu")
    assert str(e.value).startswith("--cpu: ")
    assert "guess, half, full, max" in str(e.value)


def test_a_bad_cpu_is_refused_with_one_exact_sentence_naming_option_value_and_forms():
    with pytest.raises(SpecError) as e:
        parse_cpu("0", "--cpu")
    assert str(e.value) == (
        "--cpu: '0' is not a number of cores; use a positive number (e.g. 1, 0.5, 4) or guess, half, full, max"
    )


def test_mem_reads_a_size_or_guess_and_refuses_zero_negative_or_other_words():
    assert parse_mem("2GB", "--mem") == 2 * GiB
    assert parse_mem("Guess", "--mem") == "guess"
    for bad in ("0", "0MB", "-1G", "lots", ""):
        with pytest.raises(SpecError) as e:
            parse_mem(bad, "--mem")
        assert str(e.value).startswith("--mem: ")


@pytest.mark.parametrize(
    "n, text",
    [
        (0, "0B"),
        (900, "900B"),
        (1023, "1023B"),
        (1024, "1KB"),
        (512 * MiB, "512MB"),
        (3 * GiB // 2, "1.5GB"),
        (12 * GiB, "12GB"),
        (int(2.3 * TiB), "2.3TB"),
        (MiB - 1, "1MB"),  # rounding never shows 1024KB
        (32 * MiB, "32MB"),
        (5000 * TiB, "5000TB"),
    ],
)
def test_a_size_is_shown_in_its_largest_unit_up_to_tb_with_at_most_one_decimal(n, text):
    assert format_size(n) == text


@pytest.mark.parametrize("m, text", [(1000, "1"), (1500, "1.5"), (250, "0.25"), (1, "0.001"), (12000, "12")])
def test_millicores_are_shown_as_cores_without_trailing_zeros(m, text):
    assert format_cores(m) == text


@pytest.mark.parametrize(
    "secs, text",
    [
        (45, "45s"),
        (200, "3m20s"),
        (2 * 3600 + 5 * 60, "2h05m"),
        (3 * 86400 + 4 * 3600, "3d4h"),
        (0.3, "0.3s"),
        (0, "0s"),
        (60, "1m"),
        (3600, "1h"),
        (30 * 86400, "30d"),
        (59.7, "1m"),
    ],
)
def test_a_duration_is_shown_in_at_most_two_units_dropping_a_zero_one(secs, text):
    assert format_duration(secs) == text


def test_safe_text_replaces_control_and_non_ascii_characters_and_cuts_long_text():
    assert safe_text("train.py --lr=0.1 a/b@c+d,e:f") == "train.py --lr=0.1 a/b@c+d,e:f"
    assert safe_text("a\x1b[31mb\u202ec\n") == "a??31mb?c?"
    assert safe_text("é") == "?"
    cut = safe_text("x" * 300)
    assert len(cut) == 200 and cut.endswith("…")
    assert safe_text("abcdef", limit=4) == "abc…"


def test_safe_name_makes_any_text_a_short_job_name_or_the_word_job():
    assert safe_name("train.py") == "train.py"
    assert safe_name("--foo bar!!/x") == "foo-bar-x"
    assert safe_name("!!!") == "job"
    assert safe_name("") == "job"
    assert safe_name("a\x1bb") == "a-b"
    assert len(safe_name("a" * 500)) == 128


def test_a_name_of_up_to_128_plain_characters_is_kept_and_any_other_is_refused():
    assert check_name("a.b-c_1", "--name") == "a.b-c_1"
    assert check_name("x" * 128, "--name") == "x" * 128
    for bad in ("", "-x", "a b", "a/b", "x" * 129, "é", "a\nb"):
        with pytest.raises(SpecError) as e:
            check_name(bad, "--name")
        assert str(e.value).startswith("--name: ")
        assert "128" in str(e.value)


# -- properties ----------------------------------------------------------------

_SPELLINGS = {1: ["", "B", "b"], KiB: ["K", "KB", "KiB", "k", "kb"], MiB: ["M", "MB", "MiB", "mb"],
              GiB: ["G", "GB", "GiB", "g"], TiB: ["T", "TB", "TiB", "t"]}  # fmt: skip


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=2**40), st.sampled_from(sorted(_SPELLINGS)), st.data())
def test_an_integer_with_any_unit_spelling_reads_as_that_many_units(n, scale, data):
    unit = data.draw(st.sampled_from(_SPELLINGS[scale]))
    space = data.draw(st.sampled_from(["", " "]))
    if n * scale <= numbers.BYTES:  # (the largest size qex reads back)
        assert parse_size(f"{n}{space}{unit}", "--mem") == n * scale


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=2**62))
def test_a_shown_size_reads_back_within_5_percent(n):
    text = format_size(n)
    back = parse_size(text, "x")
    assert abs(back - n) <= max(n * 0.05, 1)  # one decimal place: within 5%


@settings(max_examples=300, deadline=None, database=None)
@given(st.one_of(st.text(max_size=30), st.from_regex(r"-?[0-9.]{0,6} ?[a-zA-Z%]{0,4}", fullmatch=True)))
def test_garbage_parses_or_raises_spec_error(text):
    for parse in (parse_size, parse_duration, parse_cpu, parse_mem, check_name):
        try:
            parse(text, "--x")
        except SpecError as e:
            assert str(e).startswith("--x: ")


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=1, max_value=10**7))
def test_shown_cores_read_back_as_the_same_millicores(m):
    assert parse_cpu(format_cores(m), "--cpu") == m


@settings(max_examples=200, deadline=None, database=None)
@given(st.integers(min_value=0, max_value=10**8))
def test_a_shown_duration_reads_back_within_5_percent(secs):
    back = parse_duration(format_duration(secs), "--timeout")
    assert abs(back - secs) <= max(secs * 0.05, 1)
