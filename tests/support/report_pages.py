"""A report page read back: its sections, each with its charts' titles and its table's rows."""

from __future__ import annotations

from html.parser import HTMLParser


class _Sections(HTMLParser):
    """Section id -> (chart titles, table body rows) of a report page."""

    def __init__(self) -> None:
        super().__init__()
        self.out: dict[str, tuple[list[str], list[list[str]]]] = {}
        self.section = ""
        self.in_body = self.in_cell = self.in_title = False
        self.cell = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "section":
            self.section = a.get("id") or ""
            self.out[self.section] = ([], [])
        elif tag == "svg" and self.section:
            self.out[self.section][0].append(a.get("aria-label") or "")
        elif tag == "tbody":
            self.in_body = True
        elif tag == "tr" and self.in_body and self.section:
            self.out[self.section][1].append([])
        elif tag == "td" and self.in_body:
            self.in_cell, self.cell = True, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "tbody":
            self.in_body = False
        elif tag == "td" and self.in_cell:
            self.in_cell = False
            self.out[self.section][1][-1].append(self.cell.strip())
        elif tag == "section":
            self.section = ""

    def handle_data(self, data: str) -> None:
        if self.in_cell:
            self.cell += data


def page_sections(page: str) -> dict[str, tuple[list[str], list[list[str]]]]:
    p = _Sections()
    p.feed(page)
    return p.out
