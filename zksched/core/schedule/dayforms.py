"""Cron's month-dependent day forms (`L`, `LW`, `NW`; `NL`, `N#K`): which days of a given
month they name, and what they mean in words. Parsed in cronexpr.py; matched in schedule.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DayForms:
    """The day forms of one expression (the module docstring, and cronexpr.py's)."""

    last: bool = False  # day-of-month L
    last_weekday: bool = False  # day-of-month LW
    nearest: int = 0  # day-of-month NW: bit N set
    last_of: int = 0  # day-of-week NL: bit N set (0 = Sunday)
    nth: tuple[tuple[int, int], ...] = ()  # day-of-week N#K: (N, K)

    def explain(self) -> list[str]:
        """One line per form, for people (`zksched next`, `zksched check`)."""
        lines = []
        if self.last:
            lines.append("L: the last day of the month")
        if self.last_weekday:
            lines.append("LW: the last weekday (Monday to Friday) of the month")
        lines += [
            f"{day}W: the weekday nearest to day {day}, in the same month"
            for day in range(1, 32)
            if self.nearest >> day & 1
        ]
        lines += [
            f"{day}L: the last {_WEEKDAY_NAMES[day]} of the month"
            for day in range(7)
            if self.last_of >> day & 1
        ]
        lines += [
            f"{day}#{k}: the {_ORDINALS[k]} {_WEEKDAY_NAMES[day]} of the month"
            for day, k in self.nth
        ]
        return lines

    def dom_days(self, first_weekday: int, length: int) -> int:
        """Bit D set: day D of a month of `length` days whose 1st is `first_weekday` (0 =
        Sunday) matches a day-of-month form."""
        mask = 0
        if self.last:
            mask |= 1 << length
        if self.last_weekday:
            mask |= 1 << _nearest_weekday(length, first_weekday, length)
        nearest = self.nearest
        while nearest:
            day = nearest.bit_length() - 1
            nearest &= ~(1 << day)
            if day <= length:
                mask |= 1 << _nearest_weekday(day, first_weekday, length)
        return mask

    def dow_days(self, first_weekday: int, length: int) -> int:
        """Bit D set: day D of such a month matches a day-of-week form."""
        mask = 0
        for weekday in range(7):
            first = (weekday - first_weekday) % 7 + 1  # the month's first such weekday
            if self.last_of >> weekday & 1:
                mask |= 1 << (first + (length - first) // 7 * 7)
            for nth_weekday, k in self.nth:
                day = first + (k - 1) * 7
                if nth_weekday == weekday and day <= length:
                    mask |= 1 << day
        return mask


_WEEKDAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_ORDINALS = ("", "first", "second", "third", "fourth", "fifth")


def _nearest_weekday(day: int, first_weekday: int, length: int) -> int:
    """The weekday (Monday-Friday) nearest to `day`, in the same month (Quartz's `W`)."""
    weekday = (first_weekday + day - 1) % 7
    if weekday == 6:  # Saturday: Friday, or Monday when the 1st is a Saturday
        return day - 1 if day > 1 else day + 2
    if weekday == 0:  # Sunday: Monday, or Friday when it is the month's last day
        return day + 1 if day < length else day - 2
    return day
