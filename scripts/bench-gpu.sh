#!/usr/bin/env bash
# Builds the release `tandem`, stages it with the torch peer in .gpu/perf/ (git-ignored), and
# prints the device command that measures, in one run: tandem's perf-ops on TANDEM0 (which also
# measures the device-to-device copy rate), torch.mv/torch.matmul on the same GPU, and the report
# (markdown + SVG chart) made from both JSON files. Outputs land in $OUT there.
#
# usage: scripts/bench-gpu.sh [--reps N] [extra perf-ops arguments, e.g. -o MUL_MAT]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=50
if [[ "${1:-}" == "--reps" ]]; then
    reps="$2"
    shift 2
fi
extra="$*"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release -p tandem-tools >&2
mkdir -p .gpu/perf
# The debug line tables are not needed there; stripping keeps the carried folder small.
strip -o .gpu/perf/tandem "$target/release/tandem" 2>/dev/null || cp "$target/release/tandem" .gpu/perf/tandem
cp scripts/torch-peer.py .gpu/perf/
cat <<CMD
# device run: carry [".gpu/perf"], command:
export TANDEM_KERNEL_CACHE=/root/tk PYTHONUNBUFFERED=1; P=.gpu/perf; \$P/tandem perf-ops -d TANDEM0 --json --reps $reps $extra > \$OUT/perf.json 2> \$OUT/perf.log; rc=\$?; python3 \$P/torch-peer.py --reps $reps > \$OUT/torch.json 2> \$OUT/torch.log; \$P/tandem perf-report \$OUT/perf.json --torch \$OUT/torch.json --md \$OUT/perf.md --svg \$OUT/perf.svg; cat \$OUT/perf.md; tail -n 3 \$OUT/perf.log \$OUT/torch.log; exit \$rc
CMD
