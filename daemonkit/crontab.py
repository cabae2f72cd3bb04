"""Crontab expressions as APScheduler triggers, with crontab's day numbers.

APScheduler 3 numbers weekdays from Monday (0) where crontab numbers them from Sunday (0 or 7),
and ``CronTrigger.from_crontab`` passes the numbers through: "5 0 * * 1" would fire on Tuesdays.
Here numeric weekdays (single, ranges, lists, steps) become names first, which both agree on.
"""

from __future__ import annotations

import datetime as dt

from apscheduler.triggers.cron import CronTrigger

NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


def _number(token: str) -> int:
    if not token.isdigit() or int(token) > 7:
        raise ValueError(f"day of week {token!r} is not 0-7 or a name")
    return int(token) % 7


def weekdays(field: str) -> str:
    """Crontab's day-of-week field with every number as a name ('1-5' -> 'mon,tue,wed,thu,fri')."""
    if not any(c.isdigit() for c in field):
        return field  # '*', names and name ranges mean the same to both
    out: list[str] = []
    for part in field.split(","):
        span, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if step < 1:
            raise ValueError(f"step {step_text!r} must be positive")
        if span == "*":
            first, last = 0, 6
        elif "-" in span:
            a, b = span.split("-", 1)
            first, last = _number(a), 7 if b == "7" else _number(b)
        else:
            first = last = _number(span)
            if step_text:  # 'N/s' means N to the end, every s
                last = 6
        if last < first:
            raise ValueError(f"day-of-week range {span!r} runs backwards")
        out.extend(NAMES[d % 7] for d in range(first, last + 1, step))
    return ",".join(dict.fromkeys(out))


def cron_trigger(expr: str, timezone: dt.tzinfo | str | None = None) -> CronTrigger:
    """A trigger for a five-field crontab expression (minute hour day month weekday)."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(f"wrong number of fields: got {len(fields)}, expected 5")
    minute, hour, day, month, dow = fields
    return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=weekdays(dow), timezone=timezone)


def check(expr: str) -> str:
    """A settings validator: the expression, or a ValueError that says what is wrong."""
    try:
        cron_trigger(expr)
    except ValueError as e:
        raise ValueError(f"not a crontab expression ({e})") from None
    return expr
