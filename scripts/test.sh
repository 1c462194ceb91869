#!/usr/bin/env bash
# Runs the whole test suite against real servers started by the test kit.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-servers.sh
ensure_servers
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --all-features --profile "${NEXTEST_PROFILE:-default}"
else
  echo "cargo-nextest not found; using cargo test (no per-test timeouts)" >&2
  cargo test --workspace --all-features --lib --bins --tests
fi
# nextest does not run doctests: the README and API examples are compiled here.
cargo test --workspace --all-features --doc
