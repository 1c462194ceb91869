#!/usr/bin/env bash
# The demo: `fencelock demo` on throwaway local Redis servers that it starts itself.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-servers.sh
ensure_servers
cargo build --quiet --release -p fencelock-cli
exec "${CARGO_TARGET_DIR:-target}/release/fencelock" demo "$@"
