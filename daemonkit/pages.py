"""HTML pages from Jinja2 templates, escaped in one place: every environment made here
autoescapes, so a value reaches a page as text unless the code that built it marks it
:class:`~markupsafe.Markup` (the report's SVG charts, which escape their own text).

Templates of a package sit in its ``templates/`` folder; ``base.html`` and ``style.css`` here give
every page (the report and both landing pages) one look, inline, with no script and no URL.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import jinja2
from markupsafe import Markup

SHARED = Path(__file__).parent / "templates"

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; base-uri 'none'"
"""A second line behind the escaping: a page may not run scripts or load anything."""


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(text: str) -> str:
    """``text`` with its control characters (NUL, ESC, DEL, C1; not tab or line breaks) written as
    ``\\xNN``: a label value holding a terminal escape reaches a page or a Markdown file as text
    anyone can read, never as a raw byte a browser, pager or terminal acts on."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m[0]):02x}", text)


def _finalize(value: object) -> object:
    """Every value a template prints, before escaping: text made visible (``Markup`` is the code's
    own, already safe)."""
    return visible(value) if isinstance(value, str) and not isinstance(value, Markup) else value


@cache
def environment(templates: Path) -> jinja2.Environment:
    """The environment for the templates in ``templates``, which may extend the shared ones."""
    loader = jinja2.ChoiceLoader([jinja2.FileSystemLoader(templates), jinja2.FileSystemLoader(SHARED)])
    env = jinja2.Environment(
        loader=loader,
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.globals["csp"] = CSP
    return env


def render(templates: Path, name: str, **context: object) -> str:
    return environment(templates).get_template(name).render(**context)
