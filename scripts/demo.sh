#!/usr/bin/env bash
# Sets up, builds and runs the demo: one scg replica in front of two fake
# Spark Connect servers, a scripted client session through it, then (when run
# from a terminal) the gateway stays up for your own client until Ctrl-C.
#   SCG_DEMO_PORT (default 15003), SCG_DEMO_ADMIN_PORT (default 9090)
#   --spark: the same walkthrough on two real Spark 4.3 Connect servers with a
#            PySpark client (tests/realspark/demo.py; the test
#            realspark.demo_spark runs it without a terminal)
# Without a terminal on stdin (a script, CI) either kind stops everything it
# started and exits after the walkthrough.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
SCG_TARGETS="scg scg-fake-spark scg-demo-client" scripts/build.sh
if [ "${1:-}" = "--spark" ]; then
  exec build/realspark/py43/bin/python tests/realspark/demo.py
fi

port=${SCG_DEMO_PORT:-15003}
admin=${SCG_DEMO_ADMIN_PORT:-9090}
work=$(mktemp -d /tmp/scg-demo-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits (at most 10 s) for a port file and prints the value of KEY in it.
port_of() {
  local file=$1 key=$2
  for _ in $(seq 100); do
    if [ -s "$file" ]; then
      python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$file" "$key" && return
    fi
    sleep 0.1
  done
  echo "demo: timed out waiting for $file" >&2
  return 1
}

for name in spark-a spark-b; do
  build/scg-fake-spark --name "$name" --listen 127.0.0.1:0 --ui-listen 127.0.0.1:0 \
    --port-file "$work/$name.ports" 2> "$work/$name.log" &
  pids+=($!)
done
a=$(port_of "$work/spark-a.ports" grpc)
b=$(port_of "$work/spark-b.ports" grpc)
a_ui=$(port_of "$work/spark-a.ports" ui)
b_ui=$(port_of "$work/spark-b.ports" ui)

cat > "$work/scg.yaml" <<YAML
bind_addr: "127.0.0.1:$port"
admin_addr: "127.0.0.1:$admin"
admin: { allow_unauthenticated: true }   # loopback demo: the admin API open, no tokens
backends:
  - { name: spark-a, address: "127.0.0.1:$a", ui_url: "http://127.0.0.1:$a_ui" }
  - { name: spark-b, address: "127.0.0.1:$b", ui_url: "http://127.0.0.1:$b_ui" }
placement: { strategy: least_loaded, poll_interval_ms: 500 }
logging: { level: info }
YAML
build/scg --config "$work/scg.yaml" --port-file "$work/scg.ports" 2> "$work/scg.log" &
pids+=($!)
port_of "$work/scg.ports" grpc > /dev/null

echo
echo "scg is listening on 127.0.0.1:$port in front of spark-a (:$a) and spark-b (:$b)."
echo "A scripted client: 4 sessions, each a Config, a query whose result stream the server cuts"
echo "every 2 responses, and the reattaches that continue it."
echo "Each column names the backend that answered; a session never changes backend."
echo
build/scg-demo-client "127.0.0.1:$port" 4
echo
sleep 1  # a poll or two of the fake Spark UIs
echo "Backends as scg sees them (GET http://127.0.0.1:$admin/api/v1/backends):"
curl -s "http://127.0.0.1:$admin/api/v1/backends" | python3 -m json.tool
echo
echo "Connect your own Spark Connect client to sc://127.0.0.1:$port"
echo "  (PySpark: SparkSession.builder.remote(\"sc://127.0.0.1:$port\").getOrCreate())."
echo "The demo backends only emulate the protocol; for real queries list your Spark"
echo "Connect servers under 'backends:' in your config (docs/configuration.md) and run build/scg --config FILE."
echo "Try load-aware placement: make spark-a busy with"
echo "  curl -X POST -d '{\"slots\":8,\"active\":8,\"pending\":4}' http://127.0.0.1:$a_ui/fake/load"
echo "and new sessions go to spark-b (watch \"utilization\" and \"score\" in /api/v1/backends)."
if [ -t 0 ]; then
  echo "Gateway log: $work/scg.log. Press Ctrl-C to stop."
  wait "${pids[-1]}"
fi
