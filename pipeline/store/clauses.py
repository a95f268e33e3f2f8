"""The pieces the store's queries are built from: a WHERE clause gathered condition by
condition with its bound values beside it, and the few expressions SQLite and
PostgreSQL spell differently (a match inside the JSON labels).

Nothing a client sent is ever part of the SQL text: values go into `params` and reach
the database bound; the text holds only column names and numbers from the fixed tables
of `filters` and the queries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from pipeline.store.filters import Cursor
from pipeline.store.tables import SQLITE, Dialect


@dataclass
class Where:
    """Conditions joined by AND, their values in order."""

    conditions: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list)

    def add(self, condition: str, *values: Any) -> None:
        self.conditions.append(condition)
        self.params.extend(values)

    def any_of(self, column: str, values: Sequence[Any]) -> None:
        """`column` is one of `values` (nothing added for none)."""
        if values:
            self.add(f"{column} IN ({marks(len(values))})", *values)

    def at_least(self, column: str, value: float | None) -> None:
        if value is not None:
            self.add(f"{column} >= ?", value)

    def below(self, column: str, value: float | None) -> None:
        if value is not None:
            self.add(f"{column} < ?", value)

    def page(self, column: str, after: float | None, before: float | None, cursor: Cursor | None,
             newest_first: bool = True) -> None:
        """`column` in [`after`, `before`), and past the `cursor`'s (time, id) in the page's
        order. The cursor's time replaces the range's end it is inside of: given both,
        the index on `column` would bound its scan by the range and read every earlier
        page again."""
        if cursor is None:
            self.at_least(column, after)
            self.below(column, before)
        elif newest_first:
            self.at_least(column, after)
            if before is not None and before <= cursor.time:
                self.below(column, before)
            self.add(f"{column} <= ? AND ({column} < ? OR id < ?)", cursor.time, cursor.time, cursor.id)
        else:
            self.below(column, before)
            self.add(f"{column} >= ? AND ({column} > ? OR id > ?)", cursor.time, cursor.time, cursor.id)

    @property
    def sql(self) -> str:
        return f" WHERE {' AND '.join(self.conditions)}" if self.conditions else ""


def marks(n: int) -> str:
    return ", ".join("?" * n)


def minute_bucket(column: str, width: int) -> str:
    """The start of the `width`-second bucket holding an INTEGER time (epoch seconds >= 0;
    division of integers truncates in both)."""
    return f"({column} / {int(width)}) * {int(width)}"


def label_match(dialect: Dialect, count: int) -> str:
    """A track's labels (JSON text, {stage: label}) hold one of `count` bound labels."""
    if dialect is SQLITE:
        return (f"EXISTS (SELECT 1 FROM json_each(CASE WHEN json_valid(tracks.labels) THEN tracks.labels END)"
                f" AS l WHERE l.value IN ({marks(count)}))")
    return (f"EXISTS (SELECT 1 FROM jsonb_each_text(CAST(tracks.labels AS jsonb)) AS l(key, value)"
            f" WHERE l.value IN ({marks(count)}))")
