#!/usr/bin/env bash
# CI regression gate: run the fixed CI benchmark (conf/experiment/ci_gate.yaml) into a
# temporary folder and gate it against the committed baseline results/baselines/ci-default/
# with conf/gate/ci.yaml. Exit 0 pass, 1 regression, 2 config error, 3 mismatched cells
# (the benchmark's settings changed: regenerate the baseline with scripts/update-baseline.sh).
#
#   bash scripts/gate-ci.sh [OUT_DIR]     # OUT_DIR receives gate.json and gate-junit.xml
set -euo pipefail
source "$(dirname "$0")/ci-env.sh"
out="${1:-$repo/results/runs/gate-ci}"
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ ! -d "$baseline/cells" ]; then
  echo "gate-ci: no baseline at $baseline; create it with scripts/update-baseline.sh" >&2
  exit 2
fi
python3 -m speedbench.cli run +experiment=ci_gate results_dir="$tmp" hydra/job_logging=disabled
python3 -m speedbench.cli gate --baseline "$baseline" --current "$tmp/ci-default" --config ci \
  --json "$out/gate.json" --junit "$out/gate-junit.xml"
