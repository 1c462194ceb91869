#!/usr/bin/env bash
# The demo: contending workers on throwaway local Redis servers that it starts itself.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ensure-servers.sh
ensure_servers
cargo run --quiet --release -p fencelock --example demo -- "$@"
