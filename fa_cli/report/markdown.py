"""Markdown tables for a report, in 80 columns: a table too wide is fitted step by step (fit_table),
what leaves the table said in lines above it and in lists below it, nothing dropped."""
from __future__ import annotations

import textwrap

from .tables import NUMERIC, profile_rows

# A report's tables are read as text too (an editor, a terminal, a diff): each line at most this
# wide where the cells allow (the lines above and below a table are wrapped to it).
REPORT_WIDTH = 80
# A table split over several of more rows than this is cut into blocks of as many rows, each
# block's tables together: a row's figures stay near its name.
BLOCK_ROWS = 10


def markdown_table(header: list[str], rows: list[list[str]], keys: int = 1, width: int | None = REPORT_WIDTH) -> str:
    """A markdown table for a report (a '|' inside a cell escaped), its lines at most `width`
    characters (None: as wide as it is) where the cells allow. What does not fit moves out of the
    table, step by step until it fits (fit_table): the first `keys` columns name a row and stay in
    every table."""
    if any(len(row) != len(header) for row in rows):
        raise ValueError(f"a row of other than {len(header)} cells under {len(header)} columns")
    cell = lambda x: " ".join(str(x).split("\n")).replace("|", "\\|")  # noqa: E731
    header, rows = [cell(h) for h in header], [[cell(c) for c in row] for row in rows]
    above, tables, below = fit_table(header, rows, max(1, min(keys, len(header))), width)
    parts = [paragraph(line, width) + "\n" for line in above]
    parts += ["\n".join(_table_lines(h, r)) + "\n" for h, r in tables]
    parts += ["\n".join(paragraph(line, width, "  ") for line in block.split("\n")) + "\n" for block in below]
    return "\n".join(parts)


def paragraph(text: str, width: int | None = REPORT_WIDTH, indent: str = "") -> str:
    """A line of a report wrapped to `width` (None: as it is); later lines indented by `indent`
    (a list item's continuation). Words and paths are never broken."""
    if width is None:
        return text
    return textwrap.fill(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)


def _table_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    line = lambda cells: "| " + " | ".join(cells) + " |"  # noqa: E731
    return [line(header), "|" + "---|" * len(header), *(line(row) for row in rows)]


def _table_width(header: list[str], rows: list[list[str]]) -> int:
    return max(len(line) for line in _table_lines(header, rows))


def _is_figures(column: list[str]) -> bool:
    return all(NUMERIC.match(c) for c in column)


def fit_table(header: list[str], rows: list[list[str]], keys: int, width: int | None
              ) -> tuple[list[str], list[tuple[list[str], list[list[str]]]], list[str]]:
    """The lines above, the tables and the blocks below that say what a table too wide for
    `width` (None: any width) says, in these steps, each taken only while it is still too wide:
      1. a column of names with one value in every row: a line above ("Every row: device X."),
         the widest first (and a column with no figure in any row: named there too);
      2. a table of at most three rows: turned on its side (a row per column) where that fits;
      3. a long name repeated down a column (a program on a device): a letter, and a legend above;
      4. long texts (what a step changes, why a variant was skipped): a list below, by row, or
         where most of the column is short, the long cells as "note N" and the notes below;
      5. the other columns split over several tables, each with the first `keys` columns (where
         those are wide, a row number instead, the first table with both)."""
    fit = _Fit(header, rows, keys, width)
    for step in (fit.lift_shared, fit.turn_on_side, fit.letter_long_names, fit.move_long_texts):
        if fit.fits():
            break
        step()
    return fit.above, fit.split(), fit.below


class _Fit:
    """A table on its way into `width` columns (fit_table's steps, in order)."""

    def __init__(self, header: list[str], rows: list[list[str]], keys: int, width: int | None):
        self.header, self.rows, self.keys, self.width = header, [list(row) for row in rows], keys, width
        self.above: list[str] = []
        self.below: list[str] = []

    def fits(self) -> bool:
        return self.width is None or not self.rows or _table_width(self.header, self.rows) <= self.width

    def column(self, i: int) -> list[str]:
        return [row[i] for row in self.rows]

    def drop(self, columns: list[int]) -> None:
        self.keys = max(1, self.keys - sum(i < self.keys for i in columns))
        self.header, self.rows = _without(self.header, self.rows, columns)

    def lift_shared(self) -> None:
        """Step 1: names shared by every row (the widest first), then empty columns; a row's
        figures stay in the table."""
        if len(self.rows) < 2:
            return
        same = [i for i in range(len(self.header)) if len(set(self.column(i))) == 1]
        first = self.rows[0]
        order = (sorted((i for i in same if not _is_figures(self.column(i))), key=lambda i: -len(first[i]))
                 + [i for i in same if first[i] == "-"])
        drop: list[int] = []
        for i in order:
            if _table_width(*_without(self.header, self.rows, drop)) <= self.width or len(self.header) - len(drop) <= 2:
                break
            drop.append(i)
        if not drop:
            return
        told = [f"{self.header[i]} {first[i]}" for i in sorted(drop) if first[i] != "-"]
        empty = [self.header[i] for i in sorted(drop) if first[i] == "-"]
        line = "; ".join((["every row: " + "; ".join(told)] if told else [])
                         + ([f"no figure in any row: {', '.join(empty)}"] if empty else []))
        self.above.append(line[0].upper() + line[1:] + ".")
        self.drop(drop)

    def turn_on_side(self) -> None:
        """Step 2: a row per column, where there are at most three rows and that fits."""
        if len(self.rows) > 3 or len(self.header) <= 2:
            return
        header = [self.header[0], *(row[0] for row in self.rows)]
        rows = [[h, *self.column(i)] for i, h in enumerate(self.header) if i > 0]
        if _table_width(header, rows) <= self.width:
            self.header, self.rows, self.keys = header, rows, 1

    def letter_long_names(self) -> None:
        """Step 3: long names repeated down a column as letters, the legends above, the longest
        first; kept only where that makes the table fit (else the split of step 5 reads better)."""
        rows, legends = [list(row) for row in self.rows], len(self.above)
        for i in sorted(range(len(self.header)), key=lambda i: -max(map(len, self.column(i)))):
            distinct = list(dict.fromkeys(self.column(i)))
            if self.fits() or not 2 <= len(distinct) <= 26 or len(distinct) == len(self.rows) \
                    or min(map(len, distinct)) <= 12:
                continue
            letter = {value: chr(ord("a") + n) for n, value in enumerate(distinct)}
            self.above.append(f"{self.header[i]}: " + "; ".join(f"{letter[v]} = {v}" for v in distinct) + ".")
            for row in self.rows:
                row[i] = letter[row[i]]
        if not self.fits():
            self.rows, self.above = rows, self.above[:legends]

    def move_long_texts(self) -> None:
        """Step 4: a column mostly of long texts as a list below, by row (in the columns' order);
        then in the others, a few long cells as notes."""
        long = lambda text: len(text) > self.width // 3  # noqa: E731
        texty = lambda i: not _is_figures(self.column(i)) and any(map(long, self.column(i)))  # noqa: E731
        lists: list[str] = []
        for i in reversed(range(self.keys, len(self.header))):  # from the right: the columns left keep their places
            if not self.fits() and texty(i) and 2 * sum(map(long, self.column(i))) > len(self.rows):
                title = self.header[i]
                items = [f"- {' '.join(row[:self.keys])}: {row[i]}" for row in self.rows]
                lists.insert(0, "\n".join([title[:1].upper() + title[1:] + ":", *items]))
                self.drop([i])
        self.below += lists
        notes: list[str] = []
        for i in range(self.keys, len(self.header)):
            if self.fits() or not texty(i):
                continue
            for row in self.rows:
                if long(row[i]):
                    notes += [row[i]] if row[i] not in notes else []
                    row[i] = f"note {notes.index(row[i]) + 1}"
        if notes:
            self.below.append("\n".join(f"Note {n}: {text}" for n, text in enumerate(notes, 1)))

    def split(self) -> list[tuple[list[str], list[list[str]]]]:
        """Step 5: the columns after the names over as many tables as the width needs."""
        header, rows, keys = self.header, self.rows, self.keys
        if self.fits():
            return [(header, rows)]
        first = keys
        if _table_width(header[:keys], [row[:keys] for row in rows]) > 0.4 * self.width:  # wide names: numbered
            header, rows = ["#", *header], [[str(n), *row] for n, row in enumerate(rows, 1)]
            first, keys = keys + 1, 1
        groups, group = [], list(range(first))
        for i in range(first, len(header)):
            if len(group) > keys and _table_width(*_columns(header, rows, [*group, i])) > self.width:
                groups.append(group)
                group = list(range(keys))
            group.append(i)
        groups.append(group)
        blocks = [rows] if len(groups) == 1 or len(rows) <= BLOCK_ROWS else \
            [rows[n:n + BLOCK_ROWS] for n in range(0, len(rows), BLOCK_ROWS)]
        return [_columns(header, block, group) for block in blocks for group in groups]


def _without(header: list[str], rows: list[list[str]], drop: list[int]) -> tuple[list[str], list[list[str]]]:
    return ([h for i, h in enumerate(header) if i not in drop],
            [[c for i, c in enumerate(row) if i not in drop] for row in rows])


def _columns(header: list[str], rows: list[list[str]], which: list[int]) -> tuple[list[str], list[list[str]]]:
    return [header[j] for j in which], [[row[j] for j in which] for row in rows]


PROFILE_KEYS = 3  # input, program, kernel


def profile_markdown(records: list[dict]) -> str:
    return markdown_table(*profile_rows(records), keys=PROFILE_KEYS)
