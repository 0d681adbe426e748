"""Human labels for the cell columns, declared once: every rendered table header (report Markdown and HTML,
the capacity and load tables) is ``header(column)``, so no raw column name (``speedup_ci_low``) reaches a
reader, and the console's short labels come from the same entries.

Rules stated once:

* a label is words and a unit in parentheses (``TPOT p99, spec (ms)``); every cell column a table shows
  has an entry (tests/unit/report/test_labels.py reads every header of real reports); a header that is
  no cell column (a mechanism's name, ``O_d``) stays as it is;
* one empty-cell marker, ``EMPTY``, for every value that was not measured or does not apply (NaN, an unset
  concurrency, the rate of a closed-loop cell, a cell without a context bucket);
* one bucket spelling (``bucket_label``): token counts in full with a thousands separator, whatever named
  them (a prompt-length bucket ``8k`` is SPEED-Bench's 8,000 tokens; a live-context bucket's lower edge
  4096 is 4,096), so the same count never reads two ways.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

EMPTY = "n/a"


@dataclass(frozen=True)
class Label:
    text: str
    unit: str = ""
    short: str = ""  # the console's narrow table (default: text)

    @property
    def header(self) -> str:
        return f"{self.text} ({self.unit})" if self.unit else self.text


def _pct(prefix: str, name: str, unit: str = "ms") -> dict[str, Label]:
    """TTFT/TPOT/ITL/E2E percentile columns of both roles."""
    role = {"baseline": "baseline", "spec": "spec"}
    stat = {"mean": "mean", "p50": "p50", "p90": "p90", "p99": "p99"}
    return {f"{prefix}_{s}_{r}": Label(f"{name} {stat[s]}, {role[r]}", unit) for s in stat for r in role}


LABELS: dict[str, Label] = {
    "drafter": Label("drafter"), "method": Label("method"), "category": Label("category"),
    "dataset": Label("dataset"), "target": Label("target"), "backend": Label("backend"), "device": Label("device"),
    "temperature": Label("temperature"), "schedule": Label("schedule"), "max_new_tokens": Label("max new tokens"),
    "ignore_eos": Label("ignore EOS"),
    "num_speculative_tokens": Label("D"), "batch_size": Label("B"),
    "concurrency": Label("C"), "request_rate": Label("rate", "req/s", short="rate"),
    "context_bucket": Label("context bucket", short="context"), "n_requests": Label("requests", short="n"),
    "n_repeats": Label("repeats", short="reps"),
    "al": Label("AL"), "al_speed_bench": Label("SPEED-Bench AL", short="AL(SPEED-Bench)"),
    "acceptance_rate": Label("acceptance", short="acc"),
    "t_draft_ms": Label("draft", "ms", short="draft ms"), "t_verify_ms": Label("verify", "ms", short="verify ms"),
    "tpot_ms_baseline": Label("TPOT, baseline", "ms", short="TPOT base"),
    "tpot_ms_spec": Label("TPOT, spec", "ms", short="TPOT spec"),
    "speedup": Label("speedup"), "speedup_interval": Label("95% interval", short="95% CI"),
    "speedup_ci_low": Label("speedup, 95% low"), "speedup_ci_high": Label("speedup, 95% high"),
    "speedup_cv": Label("speedup CV", short="cv"), "speedup_noise": Label("noise (relative half-width)"),
    "speedup_predicted": Label("predicted speedup", short="predicted"),
    "speedup_throughput": Label("throughput speedup"),
    "speedup_throughput_ci_low": Label("throughput speedup, 95% low"),
    "speedup_throughput_ci_high": Label("throughput speedup, 95% high"),
    "speedup_throughput_interval": Label("throughput 95% interval"),
    "speedup_goodput": Label("goodput speedup"),
    "speedup_goodput_ci_low": Label("goodput speedup, 95% low"),
    "speedup_goodput_ci_high": Label("goodput speedup, 95% high"),
    "speedup_goodput_interval": Label("goodput 95% interval"),
    "greedy_match_rate": Label("greedy match", short="match"), "degenerate_frac": Label("loops", short="loops"),
    "stable": Label("stable"), "unstable_reason": Label("why unstable"), "status": Label("status"),
    "output_tok_s_baseline": Label("output tokens/s, baseline"), "output_tok_s_spec": Label("output tokens/s, spec"),
    "requests_s_baseline": Label("requests/s, baseline"), "requests_s_spec": Label("requests/s, spec"),
    "goodput_baseline": Label("goodput, baseline", "req/s"), "goodput_spec": Label("goodput, spec", "req/s"),
    "failed_requests_baseline": Label("failed, baseline"), "failed_requests_spec": Label("failed, spec"),
    "burst_frac": Label("burst share"), "client_cpu_share": Label("client CPU share"),
    "client_bound": Label("client-bound"),
    "tokens_per_s_user_baseline": Label("tokens/s per user, baseline"),
    "tokens_per_s_user_spec": Label("tokens/s per user, spec"),
    "path": Label("measured"), "verdict": Label("verdict"),
    "attainment_baseline": Label("attainment, baseline"), "attainment_spec": Label("attainment, spec"),
    "n_baseline": Label("requests per window, baseline"), "n_spec": Label("requests per window, spec"),
    "fixed": Label("other load setting"), "context": Label("live context from", "tokens"),
    **_pct("ttft_ms", "TTFT"), **_pct("tpot_ms", "TPOT"), **_pct("itl_ms", "ITL"), **_pct("e2e_ms", "E2E"),
    **_pct("itl_token_ms", "ITL per token"),
}
# headers that hold a context bucket, a concurrency or a rate (what ``value`` rewrites)
BUCKET_HEADERS = {"context bucket", "live context from (tokens)", "context", "bucket"}
CONCURRENCY_HEADERS = {"C", "concurrency"}
RATE_HEADERS = {"rate (req/s)", "rate", "request rate"}


def header(column: Any) -> str:
    """The human header of a column: its ``LABELS`` entry, else the name as the table gave it."""
    name = str(column)
    label = LABELS.get(name)
    return label.header if label else name


def short(column: str) -> str:
    """The console's narrow header of a column."""
    label = LABELS.get(column)
    return (label.short or label.header) if label else column


def bucket_label(value: Any) -> str:
    """One spelling for a context bucket: a token count in full (``8k`` -> ``8,000``; 4096 -> ``4,096``); an
    empty or missing bucket is ``EMPTY``; a name that is no count (``all``) stays as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return EMPTY
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{int(value):,}"
    text = str(value).strip()
    if text in ("", "(all)", "(none)", "nan"):
        return EMPTY
    if re.fullmatch(r"\d+k", text.lower()):
        return f"{int(text[:-1]) * 1000:,}"
    return f"{int(text):,}" if text.isdigit() else text


def unset(header_text: str, value: Any) -> bool:
    """A load setting that does not apply: concurrency -1 (unset), a rate of inf (closed loop)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    if header_text in CONCURRENCY_HEADERS:
        return v < 0
    if header_text in RATE_HEADERS:
        return not math.isfinite(v)
    return False
