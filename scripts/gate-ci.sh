#!/usr/bin/env bash
# CI regression gate: run the fixed CI benchmark (conf/experiment/ci_gate.yaml) into
# OUT_DIR/run/ and gate it against the committed baseline results/baselines/ci-default/
# with conf/gate/ci.yaml; the gated run stays there, for CI to upload with the verdict.
# Exit 0 pass, 1 regression, 2 config error, 3 mismatched cells (the benchmark's settings
# changed: regenerate the baseline with scripts/update-baseline.sh), 4 nothing gated.
#
#   bash scripts/gate-ci.sh [OUT_DIR]     # OUT_DIR receives gate.json, gate-junit.xml and run/ci-default/
set -euo pipefail
source "$(dirname "$0")/ci-env.sh"
out="${1:-$repo/results/runs/gate-ci}"
run="$out/run"

if [ ! -d "$baseline/cells" ]; then
  echo "gate-ci: no baseline at $baseline; create it with scripts/update-baseline.sh" >&2
  exit 2
fi
rm -rf "$run/ci-default"  # a fixed run_id: a previous gated run would be resumed, not measured again
mkdir -p "$run"
python3 -m speedbench.cli run +experiment=ci_gate results_dir="$run" hydra/job_logging=disabled
python3 -m speedbench.cli gate --baseline "$baseline" --current "$run/ci-default" --config ci \
  --json "$out/gate.json" --junit "$out/gate-junit.xml"
