#!/usr/bin/env bash
# CI regression gate: run the fixed CI benchmark (conf/experiment/ci_gate.yaml) and gate it twice
# with conf/gate/ci.yaml:
#   1. AL against the committed baseline results/baselines/ci-default/ (greedy AL is a fact of the
#      models and the code: the same on every machine);
#   2. AL and speedup against the reference: the code of the commit that wrote that baseline (its
#      provenance names it), measured on this machine, now, with the same command. A speedup is a
#      fact of the machine too (the n-gram drafter's fixed cost against a faster or slower forward
#      pass): the committed baseline's pooled speedup 1.047 came out 0.93 on a CPU whose forward
#      pass was three times faster, so only a reference measured here tells whether the code got slower.
# Sequential confirmation: when the speedup regresses, or its verdict is inconclusive (the machine's
# speed moved between the two runs, or the loss is within unstable cells' noise), a second pair (current
# first, then the reference) is measured and its verdict is the script's. Two identical-code pairs both
# crossing the line is far rarer than one; a real loss crosses it in both.
# The gated runs stay in OUT_DIR (run/, reference/, and confirm/ when measured), for CI to upload
# with the verdicts.
# Exit 0 pass, 1 regression, 2 config error (or no reference commit to re-measure), 3 mismatched
# cells (the benchmark's settings changed: regenerate the baseline with scripts/update-baseline.sh),
# 4 nothing gated, 5 inconclusive (the confirming pair's speedup verdict could not be measured either:
# a machine whose speed moves between runs; rerun the job on a quieter runner).
#
#   bash scripts/gate-ci.sh [OUT_DIR]   # OUT_DIR receives gate-al.json, gate.json, gate-junit.xml, run/, reference/
#   GATE_CI_CURRENT_OVERRIDES="faults.delay_ms=1" bash scripts/gate-ci.sh   # check that a slowed checkout fails
#   GATE_CI_OVERRIDES="protocol.max_repeats=12" bash scripts/gate-ci.sh      # Hydra overrides for every run
#   GATE_CI_HISTORY=DIR bash scripts/gate-ci.sh   # also append this run to the history DIR (kept between CI
#       runs as a cache or artifact) and look for change points across it (speedbench history; off by default)
# (GATE_CI_OVERRIDES must leave the cells' identity alone -- the protocol may change, the prompts may
# not -- or the AL gate against the committed baseline finds mismatched cells, exit 3.)
set -euo pipefail
source "$(dirname "$0")/ci-env.sh"
out="${1:-$repo/results/runs/gate-ci}"

if [ ! -d "$baseline/cells" ]; then
  echo "gate-ci: no baseline at $baseline; create it with scripts/update-baseline.sh" >&2
  exit 2
fi
sha=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["git"]["sha"] or "")' "$baseline/provenance.json")
if ! git cat-file -e "${sha:-none}^{commit}" 2>/dev/null; then
  echo "gate-ci: $baseline/provenance.json names commit '$sha', which this clone does not have:" \
       "the speedup reference cannot be measured (clone the full history, or regenerate the baseline)" >&2
  exit 2
fi
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git archive "$sha" | tar -x -C "$src"   # the reference commit's code, models and configs

measure() {  # measure reference|current RESULTS_DIR: one CI benchmark run in a fresh process
  rm -rf "$2"  # run_id is fixed: a previous gated run would be resumed, not measured again
  mkdir -p "$2"
  if [ "$1" = reference ]; then
    echo "gate-ci: measuring the reference (commit ${sha:0:12}) into $2"
    # shellcheck disable=SC2086  # GATE_CI_OVERRIDES: Hydra overrides for every run
    (cd "$src" && PYTHONPATH="$src" python3 -m speedbench.cli run +experiment=ci_gate results_dir="$2" \
       hydra/job_logging=disabled ${GATE_CI_OVERRIDES:-})
  else
    echo "gate-ci: measuring this checkout into $2"
    # shellcheck disable=SC2086  # GATE_CI_CURRENT_OVERRIDES: Hydra overrides for this checkout's runs only
    python3 -m speedbench.cli run +experiment=ci_gate results_dir="$2" hydra/job_logging=disabled \
      ${GATE_CI_OVERRIDES:-} ${GATE_CI_CURRENT_OVERRIDES:-}
  fi
}
gate() {  # gate BASELINE_RUN CURRENT_RUN JSON [gate options]: the gate's exit status
  python3 -m speedbench.cli gate --baseline "$1" --current "$2" --config ci --json "$3" "${@:4}"
}
speedup_only() {  # did the verdict in JSON fail on speedup alone (AL passed)?
  python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["checks"]
bad = {x["metric"] for x in c if x["verdict"] in ("regressed", "failed")}
sys.exit(0 if bad == {"speedup"} else 1)' "$1"
}

measure reference "$out/reference"
measure current "$out/run"
status=0
gate "$baseline" "$out/run/ci-default" "$out/gate-al.json" --metric al || status=$?
first=0
gate "$out/reference/ci-default" "$out/run/ci-default" "$out/gate.json" --junit "$out/gate-junit.xml" || first=$?
if { [ "$first" = 1 ] && speedup_only "$out/gate.json"; } || [ "$first" = 5 ]; then
  what=$([ "$first" = 5 ] && echo "was inconclusive" || echo "regressed")
  echo "gate-ci: speedup $what in the first pair; confirming with a second pair (current first this time)"
  measure current "$out/confirm/run"
  measure reference "$out/confirm/reference"
  first=0
  gate "$out/confirm/reference/ci-default" "$out/confirm/run/ci-default" "$out/gate-confirm.json" \
    --junit "$out/gate-junit.xml" || first=$?
  if [ "$first" = 0 ]; then echo "gate-ci: the second pair passed: the first pair's verdict was not confirmed"; fi
fi
status=$(( status ? status : first ))
if [ -n "${GATE_CI_HISTORY:-}" ]; then  # opt-in: the series across commits (docs/ci-gate.md, "History")
  sha_now=$(git rev-parse --short=12 HEAD 2>/dev/null || echo nogit)
  entry="$GATE_CI_HISTORY/$(date -u +%Y%m%dT%H%M%SZ)-$sha_now"
  mkdir -p "$entry"
  cp -r "$out/run/ci-default/cells" "$out/run/ci-default/provenance.json" "$entry/"  # what the history reads
  echo "gate-ci: appended this run to the history as $entry"
  hist=0
  python3 -m speedbench.cli history "$GATE_CI_HISTORY" --config ci --json "$out/history.json" || hist=$?
  status=$(( status ? status : hist ))
fi
exit "$status"
