#!/usr/bin/env bash
# Runs the whole test suite against real servers started by the test kit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-servers.sh
ensure_servers
# nextest does not run doctests, so the README and API examples are compiled first; the
# integration tests run last, so the run ends on their summary line.
cargo test --workspace --all-features --doc
# The examples README names run against throwaway servers from the test kit.
for example in cron_guard lost_worker fenced_sql any_backend; do
  cargo run --quiet -p fencelock --all-features --example "$example" >/dev/null
done
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --profile "${NEXTEST_PROFILE:-default}"
else
  echo "cargo-nextest not found; using cargo test (no per-test timeouts)" >&2
  cargo test --workspace --all-features --lib --bins --tests
fi
