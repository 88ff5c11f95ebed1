#!/usr/bin/env bash
# Runs a three-replica scg cluster on this machine, on loopback only: replicas
# scg-1, scg-2 and scg-3 seed each other and sit in front of two fake Spark
# Connect servers (spark-a, spark-b). Once all three are ready and see each
# other, a few client sessions are each started through replica 1 and then
# sent to replicas 2 and 3: one backend answers a session everywhere. Then
# the cluster stays up for your own clients until Ctrl-C, or, with --check,
# the script exits (0 when every check passed) so a test or CI job can run it.
#
#   bash scripts/cluster.sh            set up, build, run; Ctrl-C stops everything
#   bash scripts/cluster.sh --check    the same, then exit with the result
#
# Environment (all optional):
#   SCG_BUILD_DIR           use the binaries already built in this directory
#                           (scg, scg-fake-spark, scg-demo-client): no setup, no build
#   SCG_CLUSTER_GRPC_PORT   gRPC port of replica 1 (default 15003; replicas 2 and 3 take the next two)
#   SCG_CLUSTER_ADMIN_PORT  admin port of replica 1 (default 9090, then 9091, 9092)
#   SCG_CLUSTER_PEER_PORT   cluster port of replica 1 (default 7400, then 7401, 7402)
#   SCG_CLUSTER_SESSIONS    sessions to check (default 4)
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=0
case "${1:-}" in
  "") ;;
  --check) check_only=1 ;;
  -h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: scripts/cluster.sh [--check]" >&2
    exit 2
    ;;
esac

if [ -n "${SCG_BUILD_DIR:-}" ]; then
  bin=${SCG_BUILD_DIR%/}
  for b in scg scg-fake-spark scg-demo-client; do
    if [ ! -x "$bin/$b" ]; then
      echo "cluster: $bin/$b is missing; build it (cmake --build $bin --target $b) or unset SCG_BUILD_DIR" >&2
      exit 1
    fi
  done
else
  scripts/setup.sh
  SCG_TARGETS="scg scg-fake-spark scg-demo-client" scripts/build.sh
  bin=build
fi

grpc_base=${SCG_CLUSTER_GRPC_PORT:-15003}
admin_base=${SCG_CLUSTER_ADMIN_PORT:-9090}
peer_base=${SCG_CLUSTER_PEER_PORT:-7400}
sessions=${SCG_CLUSTER_SESSIONS:-4}
for v in "$grpc_base" "$admin_base" "$peer_base"; do
  if ! [[ "$v" =~ ^[0-9]+$ ]] || [ "$v" -lt 1 ] || [ "$v" -gt 65533 ]; then
    echo "cluster: port \"$v\" is not a number from 1 to 65533 (three consecutive ports are used)" >&2
    exit 2
  fi
done
if ! [[ "$sessions" =~ ^[0-9]+$ ]] || [ "$sessions" -lt 1 ] || [ "$sessions" -gt 100 ]; then
  echo "cluster: SCG_CLUSTER_SESSIONS=\"$sessions\" is not a number from 1 to 100" >&2
  exit 2
fi
replicas=(1 2 3)
grpc=() admin=() peer=()
for i in "${replicas[@]}"; do
  grpc[i]=$((grpc_base + i - 1))
  admin[i]=$((admin_base + i - 1))
  peer[i]=$((peer_base + i - 1))
done

# A port another process listens on would make a replica fail to start: say
# which one before starting anything.
busy=$(python3 - "${grpc[@]}" "${admin[@]}" "${peer[@]}" <<'PY'
import socket, sys
for port in sys.argv[1:]:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", int(port)))
    except OSError:
        print(port, end=" ")
    finally:
        s.close()
PY
)
if [ -n "$busy" ]; then
  echo "cluster: port(s) ${busy% } on 127.0.0.1 are in use; pick others with SCG_CLUSTER_GRPC_PORT," >&2
  echo "  SCG_CLUSTER_ADMIN_PORT and SCG_CLUSTER_PEER_PORT (each takes three consecutive ports)" >&2
  exit 1
fi

work=$(mktemp -d /tmp/scg-cluster-XXXXXX)
pids=()
names=()
status=0
# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  status=$?
  trap - EXIT
  trap '' INT TERM HUP
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done  # one stopped by hand
  # SIGTERM drains a replica (shutdown.deadline_secs is 2 here): wait up to 5 s,
  # then kill what is left.
  for _ in $(seq 50); do
    local alive=0
    for pid in "${pids[@]}"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    if [ "$alive" -eq 0 ]; then break; fi
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "$status" -ne 0 ] && [ "$status" -ne 130 ] && [ "$status" -ne 143 ]; then
    echo "cluster: logs kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Starts a child process (its output to $work/NAME.log) and remembers its pid.
start() {
  local name=$1
  shift
  "$@" > "$work/$name.log" 2>&1 &
  pids+=($!)
  names+=("$name")
}

# Prints the last lines of every child's log (when something went wrong).
show_logs() {
  for name in "${names[@]}"; do
    echo "--- $work/$name.log (last 15 lines)" >&2
    tail -n 15 "$work/$name.log" >&2 || true
  done
}

# Waits (at most 10 s) for NAME's port file and prints the value of KEY in it;
# fails at once when the process has exited.
port_of() {
  local name=$1 key=$2 pid=$3 file="$work/$1.ports"
  for _ in $(seq 100); do
    if [ -s "$file" ]; then
      python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$file" "$key" && return
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "cluster: $name exited while starting" >&2
      show_logs
      return 1
    fi
    sleep 0.1
  done
  echo "cluster: timed out waiting for $file" >&2
  return 1
}

# Prints how many peers replica I lists as "up" in /api/v1/cluster, or -1
# while it is not ready (/readyz not 200) or does not answer.
peers_up() {
  local i=$1
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:${admin[i]}/readyz" || true)
  if [ "$code" != 200 ]; then
    echo -1
    return
  fi
  curl -s --max-time 2 "http://127.0.0.1:${admin[i]}/api/v1/cluster" | python3 -c '
import json, sys
try:
    print(sum(m.get("status") == "up" for m in json.load(sys.stdin)["members"]))
except Exception:
    print(-1)'
}

# --- two fake Spark Connect servers --------------------------------------------
for name in spark-a spark-b; do
  start "$name" "$bin/scg-fake-spark" --name "$name" --listen 127.0.0.1:0 --ui-listen 127.0.0.1:0 \
    --port-file "$work/$name.ports"
done
a=$(port_of spark-a grpc "${pids[0]}")
b=$(port_of spark-b grpc "${pids[1]}")
a_ui=$(port_of spark-a ui "${pids[0]}")
b_ui=$(port_of spark-b ui "${pids[1]}")

# --- three replicas, each seeding the other two ----------------------------------
for i in "${replicas[@]}"; do
  seeds=()
  for j in "${replicas[@]}"; do
    if [ "$j" -ne "$i" ]; then seeds+=("\"127.0.0.1:${peer[j]}\""); fi
  done
  cat > "$work/scg-$i.yaml" <<YAML
bind_addr: "127.0.0.1:${grpc[i]}"
admin_addr: "127.0.0.1:${admin[i]}"
admin: { allow_unauthenticated: true }   # loopback demo: the admin API open, no tokens
backends:
  - { name: spark-a, address: "127.0.0.1:$a", ui_url: "http://127.0.0.1:$a_ui" }
  - { name: spark-b, address: "127.0.0.1:$b", ui_url: "http://127.0.0.1:$b_ui" }
placement: { strategy: least_loaded, poll_interval_ms: 500 }
shutdown: { deadline_secs: 2 }
logging: { level: info }
cluster:
  node_name: scg-$i
  bind_addr: "127.0.0.1:${peer[i]}"
  seeds: [$(IFS=,; echo "${seeds[*]}")]
YAML
done
# One after the other, each once the previous one listens: a replica that a
# peer reaches before it knows its own cluster address can lose its cluster
# actor (see "Known problems" in docs/cluster.md); starting in turn keeps that
# window small.
for i in "${replicas[@]}"; do
  start "scg-$i" "$bin/scg" --config "$work/scg-$i.yaml" --port-file "$work/scg-$i.ports"
  port_of "scg-$i" grpc "${pids[i + 1]}" > /dev/null
done

# --- wait until every replica is ready and sees the two others (at most 30 s) --
echo "cluster: waiting for scg-1, scg-2 and scg-3 to be ready and to see each other..."
meshed=0
deadline=$((SECONDS + 30))
for _ in $(seq 150); do
  meshed=1
  for i in "${replicas[@]}"; do
    [ "$(peers_up "$i")" = 2 ] || meshed=0
  done
  if [ "$meshed" -eq 1 ] || [ "$SECONDS" -ge "$deadline" ]; then break; fi
  for k in "${!pids[@]}"; do
    if ! kill -0 "${pids[k]}" 2>/dev/null; then
      echo "cluster: ${names[k]} exited" >&2
      show_logs
      exit 1
    fi
  done
  sleep 0.2
done
if [ "$meshed" -ne 1 ]; then
  echo "cluster: the replicas did not all become ready and meet within 30 s:" >&2
  for i in "${replicas[@]}"; do echo "  scg-$i: $(peers_up "$i") peer(s) up (-1: not ready)" >&2; done
  show_logs
  exit 1
fi

# --- one session, three replicas -------------------------------------------------
echo
echo "Each session's first RPC goes to replica 1, which places it (or asks the replica"
echo "that owns the session's key); the same session then goes to replicas 2 and 3."
echo "Each column names the backend that answered there."
echo
printf '%-38s %-10s %-10s %-10s\n' session "scg-1" "scg-2" "scg-3"
failures=0
declare -A used=()
for _ in $(seq "$sessions"); do
  session=$(python3 -c 'import uuid; print(uuid.uuid4())')
  row=()
  for i in "${replicas[@]}"; do
    out=$("$bin/scg-demo-client" "127.0.0.1:${grpc[i]}" --session "$session" --user demo 2>&1) || true
    case "$out" in
      backend=*) row+=("${out#backend=}") ;;
      *)
        row+=("error")
        echo "  scg-$i: $out" >&2
        ;;
    esac
  done
  printf '%-38s %-10s %-10s %-10s\n' "$session" "${row[@]}"
  if [ "${row[0]}" = error ] || [ "${row[0]}" != "${row[1]}" ] || [ "${row[0]}" != "${row[2]}" ]; then
    failures=$((failures + 1))
  else
    used[${row[0]}]=1
  fi
done
echo
if [ "$failures" -ne 0 ]; then
  echo "cluster: $failures of $sessions session(s) failed or changed backend between replicas" >&2
  show_logs
  exit 1
fi
echo "Every session kept its backend on all three replicas (backends used: ${!used[*]})."
echo
echo "The cluster as scg-1 sees it (GET http://127.0.0.1:${admin[1]}/api/v1/cluster):"
curl -s --max-time 2 "http://127.0.0.1:${admin[1]}/api/v1/cluster" | python3 -m json.tool
echo
for i in "${replicas[@]}"; do
  echo "scg-$i: sc://127.0.0.1:${grpc[i]}   admin http://127.0.0.1:${admin[i]}/   cluster port 127.0.0.1:${peer[i]}"
done
echo "Backends: spark-a 127.0.0.1:$a (UI :$a_ui), spark-b 127.0.0.1:$b (UI :$b_ui)"

if [ "$check_only" -eq 1 ]; then
  echo "cluster: check passed"
  exit 0
fi

echo
echo "Try it: point a Spark Connect client at any of the sc:// addresses above; a session"
echo "stays on one backend whichever replica you use. Stop a replica with"
echo "  kill -STOP ${pids[4]}    (scg-3; kill -CONT ${pids[4]} resumes it)"
echo "and watch the others mark it down within about a second in /api/v1/cluster."
echo "Logs: $work/scg-1.log, scg-2.log, scg-3.log. Press Ctrl-C to stop everything."
# Returns when any child exits (or Ctrl-C runs the trap).
ended=""
wait -n -p ended "${pids[@]}" || true
for k in "${!pids[@]}"; do
  if [ "${pids[k]}" = "$ended" ]; then
    echo "cluster: ${names[k]} exited" >&2
    unset 'pids[k]'  # reaped: its pid is no longer ours to signal
  fi
done
exit 1
