#!/usr/bin/env bash
# Installs the server programs the tests, the demo and the benchmarks start (Debian/Ubuntu).
# Sourced by the other scripts; does nothing when they are already installed.
ensure_servers() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v redis-benchmark >/dev/null || missing+=(redis-tools)
  # ZooKeeper runs from Debian's jars under java (the test kit starts it itself, no service);
  # Curator's jars are for the interop tests. Debian's headless JRE can compile the small Java
  # program those tests use (java -m jdk.compiler), so no JDK is needed.
  [ -n "${FENCELOCK_JAVA:-}" ] || command -v java >/dev/null || missing+=(default-jre-headless)
  [ -n "${FENCELOCK_ZOOKEEPER_CLASSPATH:-}" ] || [ -f /usr/share/java/zookeeper.jar ] \
    || missing+=(zookeeper)
  [ -n "${FENCELOCK_CURATOR_CLASSPATH:-}" ] || [ -f /usr/share/java/curator-recipes.jar ] \
    || missing+=(libcurator-recipes-java)
  # PostgreSQL for the fenced-SQL example and tests (the test kit runs its own server).
  [ -n "${FENCELOCK_PG_BIN:-}" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
    || missing+=(postgresql)
  # PgBouncer in transaction pooling in front of it, for the postgres service's tests (the test
  # kit starts its own on a free port; the package's service on 6432 is never used).
  [ -n "${FENCELOCK_PGBOUNCER:-}" ] || command -v pgbouncer >/dev/null \
    || [ -x /usr/sbin/pgbouncer ] || missing+=(pgbouncer)
  # etcd for the etcd backend's tests (the test kit starts its own members); protoc builds the
  # etcd client crate's gRPC code.
  command -v etcd >/dev/null || missing+=(etcd-server)
  command -v etcdctl >/dev/null || missing+=(etcd-client)
  command -v protoc >/dev/null || missing+=(protobuf-compiler)
  # The CLI's terminal tests drive `fencelock run` through a pseudo-terminal (python's pty).
  command -v python3 >/dev/null || missing+=(python3)
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null; then sudo="sudo"; else
      echo "fencelock: please install ${missing[*]} (apt-get install ${missing[*]})" >&2
      return 1
    fi
  fi
  echo "fencelock: installing ${missing[*]} with apt-get" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  # redis-server starts a system Redis on 6379; the project never uses it (it starts its own
  # servers on free ports), so leave it as the package manager set it up. The zookeeper
  # package starts no server (zookeeperd would).
}
