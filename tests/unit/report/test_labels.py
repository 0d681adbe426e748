"""Report tables for people (issue 48 item 8): every header from the one label table (``columns.labels``), no
raw column name and no mid-word break, the load point in every load and context table, one bucket spelling,
one empty-cell marker. Reads the headers and cells of real reports (synthetic-backend run folders)."""
import dataclasses
import html as htmllib
import re

import pytest

from speedbench.columns import labels
from speedbench.config import LoadConfig
from speedbench.pipeline import runner
from speedbench.records import CellResult
from speedbench.report import build_report
from speedbench.report.render import CSS, cell_text

from tests.support.synthetic_results import make_results
from tests.unit.pipeline.test_load_point_and_overall import _run

RAW = {f.name for f in dataclasses.fields(CellResult)} | {"speedup_interval", "speedup_throughput_interval",
                                                         "speedup_goodput_interval", "attainment_baseline"}
RAW = {c for c in RAW if labels.header(c) != c}  # "speedup", "category", "drafter" are their own labels
KIND = re.compile(r" \((measured|modelled|modelled from measured times)\)$")


def _tables(page: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """(section id, headers, rows of cell texts) of every table of a report page."""
    out, section = [], ""
    for part in re.split(r"(<h2 id='[^']+'>|<table>.*?</table>)", page, flags=re.S):
        if part.startswith("<h2 id="):
            section = part.split("'")[1]
        elif part.startswith("<table>"):
            heads = [htmllib.unescape(h) for h in re.findall(r"<th(?: [^>]*)?>(.*?)</th>", part)]
            rows = [[htmllib.unescape(c) for c in re.findall(r"<td(?: [^>]*)?>(.*?)</td>", r)]
                    for r in re.findall(r"<tr>(.*?)</tr>", part.split("<tbody>")[1])]
            out.append((section, heads, rows))
    return out


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("labels")
    plain = make_results(root / "plain", depths=(2, 4), batches=(1, 4))
    for c in (1, 4):
        runner.run_cells(_run(root, "lp", load=LoadConfig(concurrency=c, num_requests=4)), progress=False)
    return {name: (build_report([folder], root / f"r-{name}", plots=False).html.read_text())
            for name, folder in (("plain", plain), ("load", root / "lp"))}


def test_no_rendered_header_is_a_raw_column_name(pages):
    for name, page in pages.items():
        for section, heads, _ in _tables(page):
            for h in heads:
                bare = KIND.sub("", h)
                assert bare not in RAW, f"{name}/{section}: raw column name {h!r} in a header"
                assert not (set(re.findall(r"[a-z]+(?:_[a-z0-9]+)+", bare)) & RAW), f"{name}/{section}: {h!r}"


def test_headers_never_break_inside_a_word():
    assert "anywhere" not in CSS and "break-all" not in CSS
    assert "th{overflow-wrap:normal;word-break:normal;hyphens:none}" in CSS


def test_every_load_and_context_table_names_its_load_point(pages):
    tables = [(s, h) for s, h, rows in _tables(pages["load"]) if s in ("load", "context") and rows]
    assert tables
    for section, heads in tables:
        assert "C" in heads or "rate (req/s)" in heads, f"{section}: a table without its load point: {heads}"


def test_one_empty_cell_marker_and_one_bucket_spelling(pages):
    for name, page in pages.items():
        for section, heads, rows in _tables(page):
            for row in rows:
                for h, v in zip(heads, row):
                    assert v not in ("(none)", "(all)", "-1", "inf", "nan", "None", ""), f"{name}/{section} {h}: {v!r}"
                    if KIND.sub("", h) in labels.BUCKET_HEADERS:
                        assert not re.fullmatch(r"\d+k", v) and not re.fullmatch(r"\d{4,}", v), f"{h}: {v!r}"
    assert [cell_text("context_bucket", v) for v in ("8k", "", None, 4096)] == ["8,000", "n/a", "n/a", "4,096"]
    assert cell_text("context", 8192) == "8,192" and cell_text("concurrency", -1) == cell_text("speedup", float("nan"))
