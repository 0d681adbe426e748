"""vLLM's cumulative speculative-decoding counters, read before and after a run and subtracted.

Counters are engine-wide: a delta covers every request the engine served in between (a
batch, or all traffic on a shared server), never one request. AL from them follows the
project's convention (metrics.acceptance): AL = 1 + accepted / drafts, where a draft is a step with
at least one proposed token.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

NAMES = {
    "vllm:spec_decode_num_drafts": "drafts",
    "vllm:spec_decode_num_draft_tokens": "draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "accepted",
}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def hist_from_per_pos(drafts: int, per_pos: Sequence[int]) -> list[int]:
    """Histogram of accepted counts from vLLM's per-position counters.

    ``per_pos[i]`` = drafts whose first i+1 tokens were all accepted, so the number of drafts
    that accepted exactly k tokens is per_pos[k-1] - per_pos[k] (with per_pos[-1] = drafts).
    """
    tail = [drafts, *per_pos, 0]
    return [max(tail[k] - tail[k + 1], 0) for k in range(len(per_pos) + 1)]


@dataclass(frozen=True)
class SpecCounters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: tuple[int, ...] = field(default_factory=tuple)
    # read from a vLLM server's /metrics page (it has vllm:* series): there, no spec-decode series means no speculation
    vllm_page: bool = False

    def __sub__(self, other: "SpecCounters") -> "SpecCounters":
        n = max(len(self.per_pos), len(other.per_pos))
        a = list(self.per_pos) + [0] * (n - len(self.per_pos))
        b = list(other.per_pos) + [0] * (n - len(other.per_pos))
        return SpecCounters(
            self.drafts - other.drafts, self.draft_tokens - other.draft_tokens,
            self.accepted - other.accepted, tuple(x - y for x, y in zip(a, b)), self.vllm_page or other.vllm_page,
        )

    def __add__(self, other: "SpecCounters") -> "SpecCounters":
        n = max(len(self.per_pos), len(other.per_pos))
        a = list(self.per_pos) + [0] * (n - len(self.per_pos))
        b = list(other.per_pos) + [0] * (n - len(other.per_pos))
        return SpecCounters(
            self.drafts + other.drafts, self.draft_tokens + other.draft_tokens,
            self.accepted + other.accepted, tuple(x + y for x, y in zip(a, b)), self.vllm_page or other.vllm_page,
        )

    @property
    def al(self) -> float:
        from ..metrics import al_from_counts

        return al_from_counts(self.accepted, self.drafts)

    def hist(self) -> list[int]:
        return hist_from_per_pos(self.drafts, self.per_pos)

    def as_dict(self) -> dict:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "per_pos": list(self.per_pos), "al": self.al}


def _merge(values: dict[str, float], per_pos: dict[int, float], vllm_page: bool = False) -> SpecCounters:
    pos = [int(round(per_pos[i])) for i in sorted(per_pos)]
    return SpecCounters(
        int(round(values.get("drafts", 0))), int(round(values.get("draft_tokens", 0))),
        int(round(values.get("accepted", 0))), tuple(pos), vllm_page,
    )


def from_vllm_metrics(metrics) -> SpecCounters:
    """From ``LLM.get_metrics()`` (Counter.value / Vector.values), summed over engines."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for m in metrics:
        if m.name in NAMES:
            values[NAMES[m.name]] = values.get(NAMES[m.name], 0) + m.value
        elif m.name == PER_POS:
            for i, v in enumerate(m.values):
                per_pos[i] = per_pos.get(i, 0) + v
    return _merge(values, per_pos)


def from_prometheus_text(text: str, model: str | None = None) -> SpecCounters:
    """From a server's ``/metrics`` page (Prometheus text format; counters end in ``_total``).

    Parsed by ``prometheus_client``'s own text parser, so label values with escaped quotes,
    backslashes, braces or commas read as the server meant them. ``model`` keeps only series
    whose ``model_name`` label equals it (a server may host several). A page the parser
    cannot read raises ``ValueError`` rather than passing for zero counters.
    """
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        samples = [s for family in text_string_to_metric_families(text) for s in family.samples]
    except ValueError as exc:
        raise ValueError(f"cannot parse the /metrics page: {exc}") from None
    for sample in samples:
        name, labels, value = sample.name, sample.labels, float(sample.value)
        if name.endswith(("_created", "_bucket", "_count", "_sum")) and name not in NAMES:
            continue  # a counter's creation time; histogram parts
        base = name[: -len("_total")] if name.endswith("_total") else name
        if model is not None and "model_name" in labels and labels["model_name"] != model:
            continue
        if base in NAMES:
            values[NAMES[base]] = values.get(NAMES[base], 0) + value
        elif base == PER_POS and "position" in labels:
            i = int(labels["position"])
            per_pos[i] = per_pos.get(i, 0) + value
    return _merge(values, per_pos, vllm_page=any(sample.name.startswith("vllm:") for sample in samples))
