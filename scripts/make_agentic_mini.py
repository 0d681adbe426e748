"""Write datasets/agentic/mini.jsonl: small SPEED-Bench-style agentic trajectories from the project's material.

Each trajectory is a tool-using assistant answering one task of the qualitative suite
(datasets/qualitative.jsonl, categories rag / coding / summarization): it searches, reads
passages of datasets/filler/prose.txt (the tool outputs), thinks aloud and answers. Every
trajectory has ``--turns`` assistant turns, each after a tool output, so a cut before each
assistant turn sees a longer context than the last. Deterministic: the same files and
arguments give the same bytes.

    python scripts/make_agentic_mini.py [--out datasets/agentic/mini.jsonl] [--n 6] [--turns 4] [--chars 700]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ("search_notes", "read_passage", "read_passage", "summarise_passage")


def paragraphs(text: str, size: int) -> list[str]:
    """The prose cut into passages of about ``size`` characters at sentence ends."""
    out, cur = [], ""
    for sentence in text.replace("\n", " ").split(". "):
        cur += sentence.strip() + ". "
        if len(cur) >= size:
            out.append(cur.strip())
            cur = ""
    return out


def trajectory(i: int, task: dict, passages: list[str], turns: int) -> dict:
    messages = [{"role": "system", "content": "You are an assistant with tools: search_notes(query), "
                 "read_passage(id), summarise_passage(id). Call one tool per turn as JSON, then answer."},
                {"role": "user", "content": task["turns"][0]}]
    for t in range(turns):
        tool = TOOLS[t % len(TOOLS)]
        pid = (7 * i + 3 * t) % len(passages)
        if t == turns - 1:
            messages.append({"role": "assistant", "content": "From the passages read so far: "
                             + passages[pid].split(". ")[0] + ". That is the answer to the question asked."})
            break
        arg = {"query": task["turns"][0][:60]} if tool == "search_notes" else {"id": pid}
        messages.append({"role": "assistant", "content": f"I need more context. Calling {tool}.\n"
                         + json.dumps({"tool": tool, "arguments": arg})})
        messages.append({"role": "tool", "name": tool, "content": f"passage {pid}: {passages[pid]}"})
    return {"trajectory_id": f"agentic-{i:03d}", "category": "agentic", "src_id": str(task["question_id"]),
            "messages": messages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "datasets" / "agentic" / "mini.jsonl"))
    ap.add_argument("--n", type=int, default=6, help="trajectories")
    ap.add_argument("--turns", type=int, default=4, help="assistant turns per trajectory (cuts)")
    ap.add_argument("--chars", type=int, default=700, help="characters per tool output (passage)")
    args = ap.parse_args()
    passages = paragraphs((ROOT / "datasets" / "filler" / "prose.txt").read_text(), args.chars)
    tasks = [json.loads(line) for line in (ROOT / "datasets" / "qualitative.jsonl").read_text().splitlines() if line]
    tasks = [t for t in tasks if t["category"] in ("rag", "coding", "summarization")]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for i in range(args.n):
            f.write(json.dumps(trajectory(i, tasks[(5 * i) % len(tasks)], passages, args.turns)) + "\n")
    print(f"{out}: {args.n} trajectories x {args.turns} assistant turns")


if __name__ == "__main__":
    main()
