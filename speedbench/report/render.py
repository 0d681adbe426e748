"""Markdown and self-contained HTML (PNG plots embedded as base64) from the report's sections."""
from __future__ import annotations

import base64
import html
import re

from ..columns import labels
from .common import Figure, Section, Table, Text, fmt


def header(col: str, kinds: dict[str, str]) -> str:
    """A table header: the column's human label (``columns.labels``: never a raw column name) and its kind."""
    kind = kinds.get(col)
    text = labels.header(col)
    return f"{text} ({kind})" if kind else text


def cell_text(col: str, v) -> str:
    """One rendered cell: a context bucket in the one bucket spelling, an unset load setting as the empty-cell
    marker, everything else by ``fmt`` (whose gap is the same marker)."""
    name = labels.header(col)
    if name in labels.BUCKET_HEADERS:
        return labels.bucket_label(v)
    if labels.unset(name, v):
        return labels.EMPTY
    return fmt(v)


def text_columns(frame) -> set:
    """Columns holding words (names, labels, yes/no), not numbers: these are left-aligned."""
    return {col for col in frame.columns
            if any(isinstance(v, (str, bool)) for v in frame[col] if v is not None)}


def md_table(t: Table) -> str:
    frame = t.frame
    if frame.empty:
        return "_(no rows: n/a)_"
    cols = [header(str(c), t.kinds) for c in frame.columns]
    text = text_columns(frame)
    align = "|" + "".join(":---|" if c in text else "---:|" for c in frame.columns)
    lines = ["| " + " | ".join(c.replace("|", "\\|") for c in cols) + " |", align]
    for row in frame.itertuples(index=False):
        lines.append("| " + " | ".join(cell_text(c, v).replace("|", "\\|").replace("\n", " ")
                                       for c, v in zip(frame.columns, row)) + " |")
    out = "\n".join(lines)
    return f"{out}\n\n_{t.caption}_" if t.caption else out


def markdown(title: str, intro: list[str], sections: list[Section]) -> str:
    parts = [f"# {title}", *intro, "## Contents", "\n".join(f"- [{s.title}](#{_anchor(s.title)})" for s in sections)]
    for s in sections:
        parts.append(f"## {s.title}")
        for block in s.blocks:
            if isinstance(block, Text):
                parts.append(block.text)
            elif isinstance(block, Table):
                parts.append(md_table(block))
            elif isinstance(block, Figure):
                parts.append(f"![{block.caption}]({block.path.name})\n\n_{block.caption}_")
    return "\n\n".join(parts) + "\n"


def _anchor(title: str) -> str:
    return re.sub(r"[^a-z0-9 -]", "", title.lower()).strip().replace(" ", "-")


def _inline(text: str) -> str:
    s = html.escape(text)
    s = re.sub(r"`([^`]+)`", r"<code>\1</code>", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", s)
    s = re.sub(r"(?<![\w*])\*([^*]+)\*(?![\w*])", r"<i>\1</i>", s)
    return s


def html_text(text: str) -> str:
    out, items = [], []
    for para in text.split("\n\n"):
        lines = para.splitlines()
        if all(line.startswith("- ") for line in lines if line.strip()) and lines:
            items += [f"<li>{_inline(line[2:])}</li>" for line in lines if line.strip()]
            continue
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
            items = []
        if para.startswith("### "):
            out.append(f"<h3>{_inline(para[4:])}</h3>")
        elif para.strip():
            out.append(f"<p>{_inline(para)}</p>")
    if items:
        out.append("<ul>" + "".join(items) + "</ul>")
    return "\n".join(out)


WIDE_TABLE = 10  # a table with more columns than this is set smaller (the report's "All cells" has 17)


def html_table(t: Table) -> str:
    if t.frame.empty:
        return "<p><i>(no rows: n/a)</i></p>"
    words = text_columns(t.frame)
    is_text = [c in words for c in t.frame.columns]
    left = ' class="text"'
    head = "".join(f"<th{left if w else ''}>{html.escape(header(str(c), t.kinds))}</th>"
                   for c, w in zip(t.frame.columns, is_text))
    body = []
    for row in t.frame.itertuples(index=False):
        cells = []
        for c, v, w in zip(t.frame.columns, row, is_text):
            text = cell_text(c, v)
            names = (["na"] if text == labels.EMPTY else []) + (["text"] if w else [])
            cls = f' class="{" ".join(names)}"' if names else ""
            cells.append(f"<td{cls}>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    cap = f"<caption>{html.escape(t.caption)}</caption>" if t.caption else ""
    wide = " wide" if len(t.frame.columns) > WIDE_TABLE else ""  # many columns: smaller type, so it fits the page
    return (f"<div class='table{wide}'><table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
            "</div>")


def html_figure(f: Figure) -> str:
    data = base64.b64encode(f.path.read_bytes()).decode()
    return (f'<figure><img alt="{html.escape(f.caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(f.caption)}</figcaption></figure>")


CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
div.table{max-width:100%;overflow-x:auto;margin:.6em 0 1.2em}
table{border-collapse:collapse;font-size:.85em}
div.wide table{font-size:.72em} div.wide th,div.wide td{padding:.2em .3em} div.wide td{white-space:nowrap}
div.wide th{min-width:3.5em}
th{overflow-wrap:normal;word-break:normal;hyphens:none}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right}
th{background:#f3f3f3} td.na{color:#999;font-style:italic} td.text,th.text{text-align:left}
caption{caption-side:bottom;font-size:.85em;color:#555;text-align:left;padding-top:.3em}
figure{margin:1em 0} img{max-width:100%} figcaption{font-size:.85em;color:#555}
code{background:#f5f5f5;padding:0 .2em}
"""


def html_page(title: str, intro: list[str], sections: list[Section]) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"]
    parts += [html_text(p) for p in intro]
    parts.append("<h2>Contents</h2><ul>" + "".join(
        f"<li><a href='#{s.key}'>{html.escape(s.title)}</a></li>" for s in sections) + "</ul>")
    for s in sections:
        parts.append(f"<h2 id='{s.key}'>{html.escape(s.title)}</h2>")
        for block in s.blocks:
            if isinstance(block, Text):
                parts.append(html_text(block.text))
            elif isinstance(block, Table):
                parts.append(html_table(block))
            elif isinstance(block, Figure):
                parts.append(html_figure(block))
    parts.append("</body></html>")
    return "\n".join(parts)
