"""``speedbench import``: other tools' baseline/speculative result files -> a results folder (docs/interop.md)."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..console import UsageError


def add_cli_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pair", nargs=2, action="append", metavar=("BASELINE", "SPEC"), required=True,
                   help="one load point: the baseline server's result file and the speculative server's "
                        "(vllm bench serve JSON, or an AIPerf artifact folder / profile_export_aiperf.json); repeat per point")
    p.add_argument("--out", required=True, help="the results folder to write (must not hold cells yet)")
    p.add_argument("--format", default="auto", choices=["auto", "vllm_bench", "aiperf"], help="the files' tool (auto: detected)")
    p.add_argument("--drafter", default="imported", help="the drafter's name in the cells (the files do not say)")
    p.add_argument("--method", default="draft_model", help="the drafter's method (ngram, draft_model, eagle3, ...)")
    p.add_argument("--num-speculative-tokens", type=int, default=0,
                   help="K; 0: from the files (per-position entries or the acceptance histogram)")
    p.add_argument("--target", default="", help="the target's name in the cells (default: the model name in the files)")


def main(args: argparse.Namespace) -> int:
    from .importer import Labels, import_pairs

    out = Path(args.out)
    if (out / "cells").is_dir() and any((out / "cells").glob("*.json")):
        raise UsageError(f"--out {out}: already holds cells; import into a new folder")
    for base, spec in args.pair:
        for f in (base, spec):
            if not Path(f).exists():
                raise UsageError(f"--pair: {f}: no such file or folder")
    labels = Labels(drafter=args.drafter, method=args.method, num_speculative_tokens=args.num_speculative_tokens,
                    target=args.target, run_id=out.name)
    cells = import_pairs([(Path(b), Path(s)) for b, s in args.pair], out, labels, args.format)
    for c in cells:
        interval = (f"[{c.speedup_ci_low:.3f}, {c.speedup_ci_high:.3f}]" if c.speedup_ci_low == c.speedup_ci_low
                    else c.unstable_reason)
        print(f"{c.source}: C={c.concurrency} AL={c.al:.2f} speedup={c.speedup:.3f} {interval} -> {c.cell_id}")
    print(f"results: {out}")
    return 0
