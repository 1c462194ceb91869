#!/usr/bin/env bash
# The table of docs/SAFETY.md: `fencelock verify` on throwaway servers, one fault per run
# (each with its negative control), for the given backends (default: redis redlock
# zookeeper sentinel cluster etcd). Prints one Markdown row per backend and fault.
# FENCELOCK=path/to/fencelock uses a built binary instead of building one.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${FENCELOCK:-}" ]]; then
  source scripts/ensure-servers.sh
  ensure_servers
  cargo build --quiet -p fencelock-cli
  FENCELOCK="${CARGO_TARGET_DIR:-target}/debug/fencelock"
fi
declare -A FAULTS=(
  [redis]="pause kill server-pause server-restart server-restart-aof script-flush redis-client-pause partition netem"
  [redlock]="pause kill minority-kill minority-slow server-restart script-flush redis-client-pause partition netem"
  [zookeeper]="pause kill session-expiry server-pause leader-kill partition netem"
  [sentinel]="pause kill sentinel-failover script-flush redis-client-pause"
  [cluster]="pause kill cluster-failover slot-migration script-flush"
  [etcd]="pause kill lease-expiry server-pause leader-kill partition netem"
)
out="$(mktemp -d)"
for backend in "${@:-redis redlock zookeeper sentinel cluster etcd}"; do
  for backend1 in $backend; do
    for fault in ${FAULTS[$backend1]}; do
      dir="$out/$backend1-$fault"
      cmd=(verify --backend "$backend1" --faults "$fault" --duration 10s --seed 1)
      "$FENCELOCK" "${cmd[@]}" --report "$dir" >"$dir.log" 2>&1 || true
      python3 - "$dir/report.json" "$backend1" "$fault" "fencelock ${cmd[*]}" <<'PY'
import json, sys
path, backend, fault, cmd = sys.argv[1:]
try:
    r = json.load(open(path))
except Exception as e:
    print(f"| {backend} | {fault} | did not run ({e}) | | `{cmd}` |")
    sys.exit()
def cell(run):
    v = run["verdict"]
    unfenced = sum(1 for o in v["overlaps"] if not o["fenced"])
    lost = sum(l["overwritten"] for l in v["lost_updates"])
    bad = [f"{n} {w}" for n, w in [(unfenced, "unfenced overlaps"), (len(v["stale_writes"]), "stale writes taken"),
           (len(v["token_breaks"]), "token-order breaks"), (lost, "lost updates")] if n]
    live = all(x["ok"] is not False for x in v["recoveries"])
    text = "**violations**: " + ", ".join(bad) if bad else "safe"
    text += f"; {len(v['overlaps'])} overlaps" if v["overlaps"] and not bad else ""
    text += f"; {v['unknown_acquires']} unknown acquires" if v["unknown_acquires"] else ""
    text += "" if live else "; **not live** in the bound"
    return text
runs = r["runs"]
happened = all(f["happened"] for run in runs for f in run["injected"]) and all(run["injected"] for run in runs)
fault_cell = fault if happened else f"{fault} (**did not happen**: {runs[0]['injected'][0]['evidence'] if runs[0]['injected'] else 'skipped'})"
control = cell(runs[1]) if len(runs) > 1 else "-"
print(f"| {backend} | {fault_cell} | {cell(runs[0])} | {control} | `{cmd}` |")
PY
    done
  done
done
