"""The cron parser (jobctl.cron): fields, ranges, lists, steps, names, crontab's day rule, UTC, and its refusals."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from jobctl import cron
from jobctl.errors import Invalid


def utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=timezone.utc)  # type: ignore[misc]


def every_match(line: str, start: datetime, minutes: int) -> list[datetime]:
    """Brute force: every minute from ``start`` for ``minutes`` that the line matches."""
    c = cron.parse(line)
    return [start + timedelta(minutes=n) for n in range(minutes) if c.matches(start + timedelta(minutes=n))]


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("*/15 * * * *", {0, 15, 30, 45}),
        ("5,10-12,50-59/5 * * * *", {5, 10, 11, 12, 50, 55}),
        ("7/20 * * * *", {7, 27, 47}),
        ("0-59/30 * * * *", {0, 30}),
    ],
)
def test_minute_lists_ranges_and_steps(field: str, values: set[int]) -> None:
    assert cron.parse(field).minutes == values


def test_names_of_months_and_days_any_case_and_in_ranges() -> None:
    c = cron.parse("0 9 * JAN-mar,Dec Mon-fri")
    assert c.months == {1, 2, 3, 12}
    assert c.weekdays == {1, 2, 3, 4, 5}
    assert cron.parse("0 0 * * 0").weekdays == cron.parse("0 0 * * 7").weekdays == cron.parse("0 0 * * sun").weekdays


def test_shorthands() -> None:
    assert cron.parse("@daily").next(utc(2024, 5, 4, 12, 0)) == utc(2024, 5, 5, 0, 0)
    assert cron.parse("@hourly").next(utc(2024, 5, 4, 12, 0)) == utc(2024, 5, 4, 13, 0)


def test_day_fields_are_or_when_both_are_restricted_and_and_otherwise() -> None:
    # the 1st or the 15th, or any Friday: May 2024 has Fridays 3, 10, 17, 24, 31
    days = {t.day for t in every_match("0 0 1,15 * fri", utc(2024, 5, 1), 31 * 24 * 60)}
    assert days == {1, 3, 10, 15, 17, 24, 31}
    # a star in day-of-month: only the weekday decides (the step form counts as restricted only after a star)
    assert {t.day for t in every_match("0 0 * * fri", utc(2024, 5, 1), 31 * 24 * 60)} == {3, 10, 17, 24, 31}
    assert {t.day for t in every_match("0 0 */10 * fri", utc(2024, 5, 1), 31 * 24 * 60)} == {31}  # 1,11,21,31 AND Fri


@pytest.mark.parametrize(
    "line", ["*/7 * * * *", "30 2 * * *", "0 0 1,15 * fri", "15 9-17/2 * * mon-fri", "0 12 29 2,3 *", "*/20 3 31 * *"]
)
def test_next_and_previous_agree_with_brute_force(line: str) -> None:
    c = cron.parse(line)
    start = utc(2024, 1, 30, 22, 13)
    matches = every_match(line, start, 62 * 24 * 60)
    t = start
    assert len(matches) >= 2
    for i, want in enumerate(matches[:30]):
        got = c.next(t)
        assert got == want, (line, t)
        assert c.previous(got) == got
        if i:
            assert c.previous(got - timedelta(seconds=1)) == matches[i - 1]
        t = got


def test_previous_is_at_or_before_and_reads_utc() -> None:
    c = cron.parse("30 2 * * *")
    assert c.previous(utc(2024, 5, 4, 2, 30, 59)) == utc(2024, 5, 4, 2, 30)
    assert c.previous(utc(2024, 5, 4, 2, 29, 59)) == utc(2024, 5, 3, 2, 30)
    two_hours_east = timezone(timedelta(hours=2))
    assert c.previous(datetime(2024, 5, 4, 4, 31, tzinfo=two_hours_east)) == utc(2024, 5, 4, 2, 30)
    # a rare date: the previous 29 February
    assert cron.parse("0 0 29 feb *").previous(utc(2027, 1, 1)) == utc(2024, 2, 29)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("* * * *", "has 4 field(s)"),
        ("* * * * * *", "has 6 field(s)"),
        ("", "has 0 field(s)"),
        ("60 * * * *", "field 1 (minute) '60': 60 is out of range 0-59"),
        ("* 24 * * *", "field 2 (hour) '24': 24 is out of range 0-23"),
        ("* * 0 * *", "field 3 (day-of-month) '0': 0 is out of range 1-31"),
        ("* * 32 * *", "field 3 (day-of-month) '32'"),
        ("* * * 13 *", "field 4 (month) '13': 13 is out of range 1-12"),
        ("* * * foo *", "field 4 (month) 'foo': 'foo' is not a number or a name (jan, feb"),
        ("* * * * 8", "field 5 (day-of-week) '8': 8 is out of range 0-7"),
        ("* * * * funday", "field 5 (day-of-week) 'funday'"),
        ("*/0 * * * *", "field 1 (minute) '*/0': step 0 is out of range 1-59"),
        ("*/x * * * *", "step 'x' is not a whole number"),
        ("5-1 * * * *", "range '5-1' runs backwards"),
        ("1,,2 * * * *", "an empty item in its list"),
        ("-1 * * * *", "field 1 (minute) '-1'"),
        ("1.5 * * * *", "field 1 (minute) '1.5'"),
        ("\u0661 * * * *", "field 1 (minute)"),  # an Arabic-Indic digit is a digit to str.isdigit, not to cron
        ("0 0 30 feb *", "no date matches"),
        ("0 0 31 4,6,9,11 *", "no date matches"),
        ("@often", "is not a shorthand"),
        ("0 0 * * *\n", "control character"),
        ("0" * 300, "longer than"),
    ],
)
def test_refusals_name_the_field(line: str, words: str) -> None:
    with pytest.raises(Invalid) as got:
        cron.parse(line, "--cron")
    assert words in str(got.value)
    assert str(got.value).startswith("--cron")
    assert "\n" not in str(got.value).replace("\\n", "")
