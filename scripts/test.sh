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
  run_tests() { cargo nextest run --profile "${NEXTEST_PROFILE:-default}" "$@"; }
else
  echo "cargo-nextest not found; using cargo test (no per-test timeouts)" >&2
  run_tests() { cargo test "$@"; }
fi
# A ZooKeeper-only and an etcd-only build (no Redis client compiled): the library's own
# tests, the conformance suite on that service, and the refusal of the others' URLs.
for service in zookeeper etcd; do
  run_tests -p fencelock --no-default-features --features "$service" \
    --lib --test conformance --test features
done
run_tests --workspace --all-features --lib --bins --tests
