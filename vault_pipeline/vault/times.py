"""Relative time expressions resolved to dates: "yesterday", "last Tuesday", "two weeks ago", "vorige week".

What makes a note self-contained in time (``ingest/context.py`` writes the resolved dates into a
note's ``Context:`` line) and what a package does with a transcript turn's own times
(``retrieve/expand.py``), so both read "when" the same way.

The resolver is rule-based (English and Dutch) rather than ``dateparser``: on chat text the
library reads ordinary words as dates ("we" as Wednesday, "sun") and misses spans such as "last
weekend"; the rules are also faster and need no dependency (docs/decisions/0012-relative-time-rules.md).
Conventions: a day is its date; "last/this/next week" starts on its Monday; a weekend is its
Saturday and Sunday; a month or year starts on its first day; "N weeks ago" is the same weekday N
weeks back; "a few" counts as 3, "a couple" as 2.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal

from vault_pipeline.vault.format import MONTHS, long_date

Grain = Literal["day", "week", "weekend", "month", "season", "year", "span"]


# --------------------------------------------------------------------------- vocabulary

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple": 2, "a couple": 2,
    "a couple of": 2, "couple of": 2, "few": 3, "a few": 3,
    "een": 1, "twee": 2, "drie": 3, "vier": 4, "vijf": 5, "zes": 6, "zeven": 7, "acht": 8,
    "negen": 9, "tien": 10, "paar": 2, "een paar": 2, "enkele": 3,
}  # fmt: skip
_WEEKDAYS = {
    **{name: i for i, name in enumerate("monday tuesday wednesday thursday friday saturday sunday".split())},
    **{name: i for i, name in enumerate("mon tue wed thu fri sat sun".split())},
    "tues": 1,
    "weds": 2,
    "thur": 3,
    "thurs": 3,  # abbreviations only after last/next/this: "the sun" is no day
    **{name: i for i, name in enumerate("maandag dinsdag woensdag donderdag vrijdag zaterdag zondag".split())},
}
_MONTH_NAMES = {
    **{name.lower(): i for i, name in enumerate(MONTHS, 1)},
    **{
        name: i
        for i, name in enumerate(
            "januari februari maart april mei juni juli augustus september oktober november december".split(), 1
        )
    },
}
_UNITS = {
    "day": "day", "days": "day", "dag": "day", "dagen": "day",
    "week": "week", "weeks": "week", "weken": "week",
    "month": "month", "months": "month", "maand": "month", "maanden": "month",
    "year": "year", "years": "year", "jaar": "year", "jaren": "year",
    "weekend": "weekend", "weekends": "weekend",
}  # fmt: skip
# Meteorological seasons, northern hemisphere: (first month, months long).
_SEASONS = {
    "spring": 3, "lente": 3, "voorjaar": 3, "summer": 6, "zomer": 6,
    "fall": 9, "autumn": 9, "herfst": 9, "najaar": 9, "winter": 12,
}  # fmt: skip
_PAST = {"last", "past", "previous", "vorige", "vorig", "afgelopen"}
_NEXT = {"next", "coming", "volgende", "volgend", "komende", "aanstaande"}
_THIS = {"this", "deze", "dit"}

_NUM = r"(?:\d{1,2}|a\s+couple(?:\s+of)?|couple(?:\s+of)?|a\s+few|few|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|een\s+paar|paar|enkele|een|twee|drie|vier|vijf|zes|zeven|acht|negen|tien)"
_UNIT = r"(?:days?|weekends?|weeks?|months?|years?|dagen|dag|weken|week|maanden|maand|jaren|jaar)"
_WEEKDAY = r"(?:" + "|".join(sorted(_WEEKDAYS, key=len, reverse=True)) + r")"
_FULL_WEEKDAY = r"(?:" + "|".join(name for name in _WEEKDAYS if len(name) > 5) + r")"
_SEASON = r"(?:" + "|".join(_SEASONS) + r")"
_MONTH = r"(?:" + "|".join(_MONTH_NAMES) + r")"
_MOD = r"(?:last|past|previous|next|coming|this|vorige|vorig|afgelopen|volgende|volgend|komende|aanstaande|deze|dit)"
_PATTERN = re.compile(
    rf"""(?<![\w'’-])(?:
      (?P<ago>{_NUM})\s+(?P<ago_unit>{_UNIT})\s+(?:ago|back|geleden)
    | (?:in|over)\s+(?P<in>{_NUM})\s+(?P<in_unit>{_UNIT})(?!\s+(?:ago|geleden|of|van|time|tijd))
    | (?P<ahead>{_NUM})\s+(?P<ahead_unit>{_UNIT})\s+from\s+now
    | (?:in|over|during|for|within)\s+the\s+(?:past|last)\s+(?P<span>week|month|year)(?!\s+of\b)
    | (?P<dby>the\s+day\s+before\s+yesterday|eergisteren)
    | (?P<dat>the\s+day\s+after\s+tomorrow|overmorgen)
    | (?P<yday>yesterday|gisteren|last\s+night|gisteravond)
    | (?P<tmrw>tomorrow|morgen(?!\s*(?:ochtend|vroeg)\b)|tomorrow\s+night|morgenavond)
    | (?P<today>today|tonight|this\s+(?:morning|afternoon|evening)|vandaag|vanavond|vanochtend|vanmiddag)
    | (?P<wmod>{_MOD})\s+(?P<wday>{_WEEKDAY})
    | (?:on|op)\s+(?P<bare>{_FULL_WEEKDAY})
    | (?P<smod>{_MOD})\s+(?P<season>{_SEASON})
    | (?P<pmod>{_MOD})\s+(?P<period>week-?end|weekend|week|month|year|maand|jaar)
    | (?P<mmod>last|next|this|vorige|vorig|afgelopen|volgende|komende|deze)\s+(?P<month>{_MONTH})
    )(?![\w-])""",
    re.I | re.X,
)
# "the last week of the trip", "the next month or so": a span, not the calendar period before/after the date.
_THE_BEFORE = re.compile(r"\b(?:the|de|het)\s+$", re.I)
# "haven't talked in a few days", "the first time in two years": a duration, not a date ahead.
_DURATION_BEFORE = re.compile(r"\b(?:not|never|been|first|haven|hasn|hadn|niet|nooit)\b|n't\b|n’t\b", re.I)
_LIKE_BEFORE = re.compile(r"\b(?:like|as if|alsof)\s+$", re.I)
# A bare "on Friday" is the one before the message unless the sentence looks ahead.
_FUTURE = re.compile(
    r"\b(?:will|shall|going to|gonna|plan(?:s|ning)?|can't wait|cannot wait|looking forward|hope to|next|ga|gaan|zal|zullen)\b"
    r"|'ll\b|’ll\b",
    re.I,
)


@dataclass(frozen=True, slots=True)
class TimeRef:
    """A time expression as written, and the date (or the first and last day of the range) it means."""

    text: str
    start: date
    end: date
    grain: Grain

    def describe(self) -> str:
        """The absolute date in words: '7 May 2023', 'the week of 1 May 2023', 'April 2023', '2022'."""
        if self.grain == "year":
            return str(self.start.year)
        if self.grain == "month":
            return f"{MONTHS[self.start.month - 1]} {self.start.year}"
        if self.grain == "week":
            return f"the week of {long_date(self.start)}"
        if self.grain == "weekend":
            return f"the weekend of {long_date(self.start)}"
        if self.grain == "span":
            return f"{long_date(self.start)} to {long_date(self.end)}"
        if self.grain == "season":
            first, last = self.start, self.end
            head = MONTHS[first.month - 1] + (f" {first.year}" if first.year != last.year else "")
            return f"{head} to {MONTHS[last.month - 1]} {last.year}"
        return long_date(self.start)


# --------------------------------------------------------------------------- resolving


def resolve_times(text: str, base: date | datetime) -> list[TimeRef]:
    """Every relative time expression in ``text``, resolved against ``base`` (the message's date), in order."""
    day = base.date() if isinstance(base, datetime) else base
    refs = []
    for match in _PATTERN.finditer(text):
        modified = match.group("pmod") or match.group("wmod") or match.group("mmod") or match.group("smod")
        if modified and _THE_BEFORE.search(text, 0, match.start()):
            continue
        if match.group("in") and _DURATION_BEFORE.search(text, 0, match.start()):
            continue
        if match.group("yday") and _LIKE_BEFORE.search(text, 0, match.start()):
            continue  # "feels like yesterday": an idiom, no date
        ref = _resolve(match, day, future=bool(_FUTURE.search(text)))
        if ref is not None:
            refs.append(ref)
    return refs


def _resolve(m: re.Match[str], base: date, *, future: bool = False) -> TimeRef | None:
    text = " ".join(m.group(0).split())
    if m.group("ago"):
        return _shift(text, base, -_count(m.group("ago")), _UNITS[m.group("ago_unit").lower()])
    if m.group("in"):
        return _shift(text, base, _count(m.group("in")), _UNITS[m.group("in_unit").lower()])
    if m.group("ahead"):
        return _shift(text, base, _count(m.group("ahead")), _UNITS[m.group("ahead_unit").lower()])
    if m.group("span"):
        unit = m.group("span").lower()
        start = base - timedelta(weeks=1) if unit == "week" else add_months(base, -12 if unit == "year" else -1)
        return TimeRef(text, start, base, "span")
    for group, days in (("dby", -2), ("dat", 2), ("yday", -1), ("tmrw", 1), ("today", 0)):
        if m.group(group):
            day = base + timedelta(days=days)
            return TimeRef(text, day, day, "day")
    if m.group("bare"):
        return _weekday(text, base, "next" if future else "last", _WEEKDAYS[m.group("bare").lower()])
    if m.group("season"):
        return _season(text, base, m.group("smod").lower(), _SEASONS[m.group("season").lower()])
    if m.group("wday"):
        return _weekday(text, base, m.group("wmod").lower(), _WEEKDAYS[m.group("wday").lower()])
    if m.group("period"):
        return _period(text, base, m.group("pmod").lower(), m.group("period").lower().replace("-", ""))
    if m.group("month"):
        return _month_name(text, base, m.group("mmod").lower(), _MONTH_NAMES[m.group("month").lower()])
    return None


def _count(words: str) -> int:
    key = " ".join(words.lower().split())
    return int(key) if key.isdigit() else _NUMBERS[key]


def _shift(text: str, base: date, n: int, unit: str) -> TimeRef:
    """N days/weeks/months/years from ``base``; the result is a day (same weekday, same day of month)."""
    if unit == "weekend":
        saturday = base - timedelta(days=base.weekday()) + timedelta(days=5, weeks=n)
        return TimeRef(text, saturday, saturday + timedelta(days=1), "weekend")
    if unit == "day":
        day = base + timedelta(days=n)
    elif unit == "week":
        day = base + timedelta(weeks=n)
    else:
        months = n * (12 if unit == "year" else 1)
        day = add_months(base, months)
    return TimeRef(text, day, day, "day")


def add_months(day: date, months: int) -> date:
    """The same day ``months`` later (or earlier), clamped to the month's last day."""
    index = day.year * 12 + day.month - 1 + months
    year, month = divmod(index, 12)
    return date(year, month + 1, min(day.day, calendar.monthrange(year, month + 1)[1]))


def _weekday(text: str, base: date, mod: str, weekday: int) -> TimeRef:
    """'last Tuesday': the latest Tuesday before the date; 'next Tuesday': the first after; 'this': in its week."""
    if mod in _PAST:
        back = (base.weekday() - weekday) % 7 or 7
        day = base - timedelta(days=back)
    elif mod in _NEXT:
        ahead = (weekday - base.weekday()) % 7 or 7
        day = base + timedelta(days=ahead)
    else:
        day = base + timedelta(days=weekday - base.weekday())
    return TimeRef(text, day, day, "day")


def _period(text: str, base: date, mod: str, period: str) -> TimeRef:
    step = -1 if mod in _PAST else 1 if mod in _NEXT else 0
    if period in ("week", "weekend"):
        monday = base - timedelta(days=base.weekday()) + timedelta(weeks=step)
        if period == "week":
            return TimeRef(text, monday, monday + timedelta(days=6), "week")
        return TimeRef(text, monday + timedelta(days=5), monday + timedelta(days=6), "weekend")
    if period in ("month", "maand"):
        first = add_months(base.replace(day=1), step)
        return TimeRef(text, first, add_months(first, 1) - timedelta(days=1), "month")
    year = base.year + step
    return TimeRef(text, date(year, 1, 1), date(year, 12, 31), "year")


def _season(text: str, base: date, mod: str, first_month: int) -> TimeRef:
    """'last summer': the latest summer that ended before the date; 'next': the first that starts after it."""
    index = base.year * 12 + base.month - 1  # months since year 0
    start = index - (base.month - first_month) % 12  # the latest start of this season at or before ``base``
    inside = index < start + 3
    last, this, ahead = (start - 12, start, start + 12) if inside else (start, start + 12, start + 12)
    chosen = last if mod in _PAST else ahead if mod in _NEXT else this
    year, month = divmod(chosen, 12)
    first = date(year, month + 1, 1)
    return TimeRef(text, first, add_months(first, 3) - timedelta(days=1), "season")


def _month_name(text: str, base: date, mod: str, month: int) -> TimeRef:
    """'last May': the latest May before the date's month; 'next May': the first after; 'this May': this year's."""
    year = base.year
    if mod in _PAST:
        year -= 1 if month >= base.month else 0
    elif mod in _NEXT:
        year += 1 if month <= base.month else 0
    first = date(year, month, 1)
    return TimeRef(text, first, add_months(first, 1) - timedelta(days=1), "month")
