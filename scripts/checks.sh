#!/usr/bin/env bash
# The checks of a maintained crate, beside the tests (CI runs them; so can you):
# - the library builds, lint-free, with the default features, each other service alone (no
#   Redis), and metrics (README, "Cargo features"; the tests run them in scripts/test.sh);
# - documentation builds with every intra-doc link resolved, the CLI's included;
# - the default features pull in no ZooKeeper or etcd client;
# - the declared MSRV (`rust-version` in Cargo.toml) builds the library and the CLI, with the
#   toolchain installed through rustup;
# - the dependencies' licences are allowed and no banned crate is pulled in (deny.toml, read
#   by scripts/licenses.py, and by cargo-deny when it is installed);
# - the three crates package for publishing, and each package builds on its own.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== feature combinations"
for features in "" "--no-default-features --features zookeeper" \
  "--no-default-features --features etcd" "--features metrics"; do
  # shellcheck disable=SC2086 # the flags are words
  cargo clippy --quiet -p fencelock $features --all-targets -- -D warnings
done

echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --all-features --lib
# A ZooKeeper-only or etcd-only build has no Redis items to link to.
for service in zookeeper etcd; do
  RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p fencelock --no-deps --no-default-features \
    --features "$service"
done
# The CLI is a binary named like the library: its (private) docs are checked in a run of
# their own, since one run would write both to target/doc/fencelock.
RUSTDOCFLAGS="-D warnings" cargo doc --quiet -p fencelock-cli --no-deps --all-features --bins

echo "== cargo tree: the default build has no ZooKeeper or etcd client"
for client in zookeeper-client etcd-client; do
  if cargo tree --locked -p fencelock -e normal,build --prefix none | grep -q "^$client "; then
    echo "the default features pull in $client" >&2
    exit 1
  fi
done

msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
echo "== MSRV $msrv"
rustup toolchain install "$msrv" --profile minimal >/dev/null
CARGO_TARGET_DIR=target/msrv cargo +"$msrv" check --locked -p fencelock -p fencelock-cli \
  --all-features --lib --bins

echo "== licences and bans (deny.toml)"
# The same rules, read by a short script (seconds; building cargo-deny took longer than any
# other CI step), and by cargo-deny itself where it is installed.
python3 scripts/licenses.py
if command -v cargo-deny >/dev/null; then
  cargo deny check licenses bans
fi

echo "== cargo package"
# Verified: each package is unpacked and built as a user of the registry would build it, so
# a file the package leaves out fails here. (Local changes are allowed so that the checks run
# before a commit too.)
# cargo unpacks the workspace's own packages from its temporary registry into
# $CARGO_HOME/registry/src/-<hash>/ and builds them into target/debug as registry packages,
# which it never rebuilds: a copy or a build left by an earlier run (earlier sources) would be
# verified instead. Remove both first (a fresh machine has neither).
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/fencelock*
debug="${CARGO_TARGET_DIR:-target}/debug"
for dep in "$debug"/deps/fencelock*.d; do
  if [ -e "$dep" ] && grep -q "registry/src/-" "$dep"; then
    stem=$(basename "$dep" .d)
    rm -rf "$debug/deps/$stem"* "$debug/deps/lib$stem"* "$debug/.fingerprint/$stem"
  fi
done
cargo package --workspace --locked --allow-dirty --quiet >/dev/null
echo "checks passed"
