"""The context axis: backend x B x context length x drafter x D, then the schedule and report over it.

Runs, per backend, one ``speedbench run -m`` sweep over ``--batches`` x ``--datasets`` (one split per
context length) x ``--drafters`` x ``--depths`` into ``RESULTS/<backend>``, then
``speedbench schedule RESULTS/<backend> --by context --drafter NAME`` per backend and drafter (a
drafter's schedule is over one engine) and one ``speedbench report`` over every backend's folder
(``RESULTS/report``).
Every name is a parameter, so the full sweep runs with a long-context target (its conf/target name), e.g.::

    python benchmarks/context_axis.py --results results/context --target MY_LONG_TARGET \\
        --datasets throughput_1k,throughput_8k,throughput_32k --drafters tiny_draft_small,ngram \\
        --backends torch,vllm --batches 1,4 --depths 2,4,6

The default is the smallest run that proves the pipeline (tiny target, 1k, B=1, D=2, ngram, torch).
``--dry-run`` prints the commands only. Extra ``key=value`` overrides after ``--`` go to every run
(e.g. ``-- dataset.n_requests=6 acceptance.context_edges=[0,1024,8192,32768]``).
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path


def run_commands(args: argparse.Namespace, extra: list[str]) -> list[list[str]]:
    cli = [sys.executable, "-m", "speedbench.cli"]
    out = []
    for backend in args.backends.split(","):
        out.append([*cli, "run", "-m", f"target={args.target}", f"backend={backend}", f"drafter={args.drafters}",
                    f"drafter.num_speculative_tokens={args.depths}", f"batch_size={args.batches}",
                    f"dataset={args.datasets}", f"max_new_tokens={args.max_new_tokens}",
                    f"results_dir={args.results}", f"run_id={backend}", *extra])
    return out


def after_commands(args: argparse.Namespace) -> list[list[str]]:
    cli = [sys.executable, "-m", "speedbench.cli"]
    folders = [str(Path(args.results) / b) for b in args.backends.split(",")]
    out = [[*cli, "schedule", f, "--by", "context", "--drafter", d, "--out", str(Path(f) / f"schedule_by_context_{d}.json")]
           for f in folders for d in args.drafters.split(",")]
    return out + [[*cli, "report", *folders, "--out", str(Path(args.results) / "report")]]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results/context_axis", help="results root (one folder per backend in it)")
    ap.add_argument("--target", default="tiny", help="target config name (conf/target)")
    ap.add_argument("--datasets", default="throughput_1k", help="dataset configs, one per context length (comma list)")
    ap.add_argument("--drafters", default="ngram", help="drafter configs (comma list), e.g. tiny_draft_small,ngram")
    ap.add_argument("--backends", default="torch", help="backends (comma list): torch,vllm")
    ap.add_argument("--batches", default="1", help="batch sizes (comma list)")
    ap.add_argument("--depths", default="2", help="draft lengths D (comma list)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    for cmd in run_commands(args, extra) + after_commands(args):
        print("$", shlex.join(cmd[2:] if cmd[:2] == [sys.executable, "-m"] else cmd), flush=True)
        if args.dry_run:
            continue
        code = subprocess.call(cmd)
        if code not in (0, 1):  # schedule exits 1 only with --verify; anything else stops the benchmark
            print(f"context_axis: stopped: exit {code}", file=sys.stderr)
            return code
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
