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
for example in cron_guard lost_worker standby fenced_sql any_backend; do
  cargo run --quiet -p fencelock --all-features --example "$example" >/dev/null
done
# Every example is built, since tests/prometheus.rs runs the Prometheus one (a server that
# does not end by itself) and `--tests` below builds no example.
cargo build --quiet -p fencelock --all-features --examples
if cargo nextest --version >/dev/null 2>&1; then
  run_tests() { cargo nextest run --profile "${NEXTEST_PROFILE:-default}" "$@"; }
else
  echo "cargo-nextest not found; using cargo test (no per-test timeouts)" >&2
  run_tests() { cargo test "$@"; }
fi
# README's "Cargo features": the default build (Redis alone), a ZooKeeper-only and an
# etcd-only build (no Redis client compiled): the library's own tests, the conformance suite
# on that build's services, and the refusal of the others' URLs. Everything else runs below
# with every feature on.
for features in "" "--no-default-features --features zookeeper" \
  "--no-default-features --features etcd"; do
  # shellcheck disable=SC2086 # the flags are words
  run_tests -p fencelock $features --lib --test conformance --test features
done
run_tests --workspace --all-features --lib --bins --tests
