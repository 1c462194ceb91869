#!/usr/bin/env bash
# Runs every libFuzzer target in fuzz/ for SECONDS each (default 300), one after another, on
# the stable toolchain (no sanitizer; see fuzz/README.md). Stops at the first crash, whose
# input is left in fuzz/artifacts/<target>/. Installs cargo-fuzz when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-300}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in url names durations options; do
  mkdir -p "fuzz/corpus/$target"
  seeds=()
  [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
  extra=()
  [ "$target" = url ] && extra=(-dict=fuzz/url.dict -max_len=256)
  echo "== $target: ${seconds}s"
  cargo fuzz run -s none "$target" "fuzz/corpus/$target" "${seeds[@]}" -- \
    -max_total_time="$seconds" "${extra[@]}"
done
