#!/usr/bin/env bash
# scg's benchmark, one command, on loopback: scg-fake-spark direct, through scg,
# through nginx (grpc_pass) and through HAProxy (h2 both sides), interleaved and
# repeated; then stalled readers (clients that never read their results) beside
# well-behaved load through scg, scg's memory per idle session and the cluster's
# replication (delay at a steady rate, bindings per second, a full sync to a
# joining replica).
#
#   scripts/bench.sh                        full run (3 rounds, 1 GiB streams, 100k sessions)
#   BENCH_QUICK=1 scripts/bench.sh          smoke test (under 2 minutes), every path and workload
#   BENCH_SOAK_SECS=600 scripts/bench.sh soak
#                                           steady unary + stream load through scg, RSS every 10 s
#   BENCH_SCG_BEFORE=/tmp/scg-old/build/scg BENCH_WORKLOADS="unary stream" scripts/bench.sh
#                                           before/after figures of a change in one run: the
#                                           path "before" is that older scg binary
#
# Settings (environment): BENCH_ROUNDS, BENCH_UNARY_SECS, BENCH_WARMUP_SECS,
# BENCH_STREAM_BYTES, BENCH_MESSAGE_BYTES, BENCH_STREAM_REPEATS (stream samples per
# path and round), BENCH_SESSIONS, BENCH_REPL_SESSIONS (0: no cluster phase),
# BENCH_REPLICAS (2 or 3), BENCH_REPL_RATE and BENCH_REPL_RATE_SECS (the steady
# rate of new sessions for the delay), BENCH_SYNC_ENTRIES (the full sync's size),
# BENCH_SYNC_REPEATS (how many times, default 1, a replica joins, syncs and
# leaves: more decisions for a steadier p99, pooled; the slowest sync reported),
# BENCH_SAMPLE_SLOW (1: while decisions are timed, the seed's count of those
# over 10 ms is read ten times a second, and the log says when they happened,
# to line a rare pause up with a profile; off by default, as the reads load
# the seed a little),
# BENCH_DECISION_RATE and BENCH_DECISION_SECS (the new sessions/s sent to the seed
# replica while its placement decisions are timed, during a refresh pass,
# during the full sync, and while a busy loop runs on every core as a control;
# default 200/s for 10 s), BENCH_REFRESH_WINDOW_SECS (the
# refresh phase's length at least, default 40 s: one pass at the default ttls),
# BENCH_CLUSTER_SESSION_TTL_SECS (the cluster phase's affinity.session_ttl_secs;
# e.g. 400, so that a refresh pass looks up the use of the bindings older than
# a quarter of it instead of skipping a table just filled),
# BENCH_PATHS (default "direct scg nginx haproxy"; "direct scg before nginx haproxy"
# with BENCH_SCG_BEFORE), BENCH_SCG_BEFORE (another scg binary: the path "before",
# started like scg with the same YAML in front of the same fake, on its own ports,
# for the unary, h2load and stream workloads), BENCH_WORKLOADS (default
# "unary h2load stream stalled"; e.g. "unary" for the unary runs alone; "replay" adds
# scripts/bench_replay.py's replay figures, BENCH_REPLAY_SESSIONS sessions for its memory
# figure, default 2000), BENCH_CONCURRENCIES
# (unary, default "1 32 256"), BENCH_STALLED (the stalled readers' counts, default
# "0 16 64"), BENCH_SOAK_SECS, BENCH_BUILD_DIR, BENCH_BUILD (0: use the binaries
# in BENCH_BUILD_DIR as they are, without building), BENCH_KEEP (1: keep the
# replicas' logs and the raw files in the work directory it names),
# BENCH_BEFORE_YAML (extra top-level YAML for the path "before" alone: with
# BENCH_SCG_BEFORE=build/scg, one setting against its default in one run, e.g.
# 'on_backend_lost: { action: replay }'),
# BENCH_SCG_YAML (extra top-level YAML for every scg the run starts, e.g.
# 'limits: { sched_slice_us: 0 }': one setting against another, run by run),
# BENCH_CORES (1: every process the run starts may dump core, where the
# kernel's core_pattern says, which the log names: a crash to read in gdb).
# nginx, haproxy and h2load come from `scripts/setup.sh --bench` (called when a
# path or workload that needs one is selected and it is missing).
# Results go to bench-results/ (JSON, Markdown, raw records). What the figures
# mean: docs/performance.md.
set -euo pipefail

# BENCH_SCG_BEFORE is relative to where the script was started.
SCG_BEFORE=${BENCH_SCG_BEFORE:+$(realpath -m -- "$BENCH_SCG_BEFORE")}
cd "$(dirname "$0")/.."
BUILD=${BENCH_BUILD_DIR:-build}
MODE=${1:-bench}
[[ $MODE == bench || $MODE == soak ]] || {
  echo "usage: scripts/bench.sh [bench|soak]" >&2
  exit 2
}

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
  defaults=(1 2 1 $((64 << 20)) 10000 1 2000 60 2 10000)
else
  defaults=(3 10 2 $((1 << 30)) 100000 3 20000 600 10 100000)
fi
ROUNDS=${BENCH_ROUNDS:-${defaults[0]}}
UNARY_SECS=${BENCH_UNARY_SECS:-${defaults[1]}}
WARMUP_SECS=${BENCH_WARMUP_SECS:-${defaults[2]}}
STREAM_BYTES=${BENCH_STREAM_BYTES:-${defaults[3]}}
MESSAGE_BYTES=${BENCH_MESSAGE_BYTES:-$((4 << 20))}
SESSIONS=${BENCH_SESSIONS:-${defaults[4]}}
STREAM_REPEATS=${BENCH_STREAM_REPEATS:-${defaults[5]}}
REPL_SESSIONS=${BENCH_REPL_SESSIONS:-${defaults[6]}}
REPLICAS=${BENCH_REPLICAS:-3}
REPL_RATE=${BENCH_REPL_RATE:-1000}
REPL_RATE_SECS=${BENCH_REPL_RATE_SECS:-${defaults[8]}}
DECISION_RATE=${BENCH_DECISION_RATE:-200}
DECISION_SECS=${BENCH_DECISION_SECS:-10}
REFRESH_WINDOW_SECS=${BENCH_REFRESH_WINDOW_SECS:-40}  # covers one refresh pass at the default ttls
SYNC_ENTRIES=${BENCH_SYNC_ENTRIES:-${defaults[9]}}
SYNC_REPEATS=${BENCH_SYNC_REPEATS:-1}
SAMPLE_SLOW=${BENCH_SAMPLE_SLOW:-0}
CLUSTER_SESSION_TTL=${BENCH_CLUSTER_SESSION_TTL_SECS:-}  # the cluster phase's affinity.session_ttl_secs (default: scg's)
SOAK_SECS=${BENCH_SOAK_SECS:-${defaults[7]}}
default_paths="direct scg nginx haproxy"
[[ -n $SCG_BEFORE ]] && default_paths="direct scg before nginx haproxy"
read -r -a PATHS <<<"${BENCH_PATHS:-$default_paths}"
read -r -a WORKLOADS <<<"${BENCH_WORKLOADS:-unary h2load stream stalled}"
read -r -a UNARY_CONCURRENCIES <<<"${BENCH_CONCURRENCIES:-1 32 256}"
read -r -a STALLED <<<"${BENCH_STALLED:-0 16 64}"
STALLED_CONCURRENCY=32
H2LOAD_CONCURRENCY=32 # 2 connections of 16 streams, like scg-bench's 2 workers
SESSION_CONCURRENCY=32
SESSION_WARMUP=1000

log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

# alive_or_die PID NAME LOG: stops the run, naming NAME, how it ended and its
# log, when the process PID (a child of this shell) is gone.
alive_or_die() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) || state=""
  [[ -n $state && $state != Z ]] && return 0 # a zombie is gone too, until reaped
  local rc=0 how
  wait "$1" 2>/dev/null || rc=$?
  if ((rc > 128)); then how="killed by signal $((rc - 128))"; else how="exit $rc"; fi
  die "$2 (pid $1) ended during the run ($how); its log: $3"
}

for setting in ROUNDS UNARY_SECS WARMUP_SECS STREAM_BYTES MESSAGE_BYTES SESSIONS STREAM_REPEATS REPL_SESSIONS REPLICAS \
  REPL_RATE REPL_RATE_SECS SYNC_ENTRIES SYNC_REPEATS SAMPLE_SLOW DECISION_RATE DECISION_SECS SOAK_SECS; do
  [[ ${!setting} =~ ^[0-9]+$ ]] || die "BENCH_$setting must be a non-negative integer, got '${!setting}'"
done
((ROUNDS >= 1 && UNARY_SECS >= 1 && STREAM_REPEATS >= 1 && MESSAGE_BYTES >= 1 && STREAM_BYTES >= MESSAGE_BYTES)) ||
  die "need BENCH_ROUNDS, BENCH_UNARY_SECS, BENCH_STREAM_REPEATS >= 1 and BENCH_STREAM_BYTES >= BENCH_MESSAGE_BYTES >= 1"
((REPLICAS >= 2 && REPLICAS <= 3)) || die "BENCH_REPLICAS must be 2 or 3"
((SYNC_REPEATS >= 1)) || die "BENCH_SYNC_REPEATS must be 1 or more"
[[ -z $CLUSTER_SESSION_TTL || $CLUSTER_SESSION_TTL =~ ^[1-9][0-9]*$ ]] ||
  die "BENCH_CLUSTER_SESSION_TTL_SECS must be a positive integer, got '$CLUSTER_SESSION_TTL'"
((REPL_RATE >= 1 && REPL_RATE_SECS >= 1)) || die "BENCH_REPL_RATE and BENCH_REPL_RATE_SECS must be at least 1"
((SOAK_SECS >= 20)) || die "BENCH_SOAK_SECS must be at least 20"
for path in "${PATHS[@]}"; do
  [[ $path =~ ^(direct|scg|before|nginx|haproxy)$ ]] || die "BENCH_PATHS: unknown path '$path'"
  [[ $path != before || -n $SCG_BEFORE ]] || die "BENCH_PATHS: the path 'before' needs BENCH_SCG_BEFORE"
done
for workload in "${WORKLOADS[@]}"; do
  [[ $workload =~ ^(unary|h2load|stream|stalled|replay)$ ]] || die "BENCH_WORKLOADS: unknown workload '$workload'"
done
for concurrency in "${UNARY_CONCURRENCIES[@]}"; do
  [[ $concurrency =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONCURRENCIES: not a positive integer: '$concurrency'"
done
for n in "${STALLED[@]}"; do
  [[ $n =~ ^(0|[1-9][0-9]*)$ ]] || die "BENCH_STALLED: not a non-negative integer: '$n'"
done
# The stalled readers' ratios are against N=0 of the same round: it runs first.
[[ " ${STALLED[*]} " == *" 0 "* ]] || STALLED=(0 "${STALLED[@]}")
# workload NAME: true when NAME is in BENCH_WORKLOADS.
workload() { [[ " ${WORKLOADS[*]} " == *" $1 "* ]]; }
# path NAME: true when NAME is in BENCH_PATHS.
path_selected() { [[ " ${PATHS[*]} " == *" $1 "* ]]; }

# The proxies and h2load are bench-only packages: the test setup does not need
# them, nor does a run without their paths and h2load.
export PATH=$PATH:/usr/sbin
needed=()
path_selected nginx && needed+=(nginx)
path_selected haproxy && needed+=(haproxy)
workload h2load && needed+=(h2load)
for tool in "${needed[@]}"; do
  command -v "$tool" >/dev/null || {
    scripts/setup.sh --bench
    break
  }
done
command -v curl >/dev/null || die "curl is missing (scripts/setup.sh installs it)"

if [[ ${BENCH_BUILD:-1} == 0 ]]; then
  log "using the binaries in $BUILD as they are (BENCH_BUILD=0)"
  for binary in scg scg-fake-spark scg-bench; do [[ -x $BUILD/$binary ]] || die "no $BUILD/$binary"; done
else
  log "building scg, scg-fake-spark and scg-bench in $BUILD"
  cmake --build "$BUILD" -j2 --target scg scg-fake-spark scg-bench >&2
fi
[[ -z $SCG_BEFORE || -x $SCG_BEFORE ]] || die "BENCH_SCG_BEFORE: no executable $SCG_BEFORE"

# Others may rebuild scg while this runs: name the source and binary measured.
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && REV="$REV+dirty"
SCG_BINARY=$(sha256sum "$BUILD/scg" | cut -c1-12)
SCG_BEFORE_BINARY=""
if [[ -n $SCG_BEFORE ]]; then
  SCG_BEFORE_BINARY=$(sha256sum "$SCG_BEFORE" | cut -c1-12)
  [[ $SCG_BEFORE_BINARY != "$SCG_BINARY" ]] || log "WARNING: BENCH_SCG_BEFORE is the same binary as $BUILD/scg"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/scg-bench.XXXXXX")
RAW=$WORK/raw.jsonl
CLK_TCK=$(getconf CLK_TCK)
if [[ ${BENCH_CORES:-0} == 1 ]]; then
  ulimit -c unlimited
  echo "bench: core dumps on; the kernel writes them as $(cat /proc/sys/kernel/core_pattern) (BENCH_CORES=1)" >&2
fi

# ------------------------------------------------------------------ processes

CHILDREN=() # every background process we started, stopped by pid on exit

forget_child() {
  local pid=$1 kept=() p
  for p in "${CHILDREN[@]}"; do [[ $p == "$pid" ]] || kept+=("$p"); done
  CHILDREN=("${kept[@]}")
}

# stop_pid PID: SIGTERM, up to 10 s to exit, then SIGKILL.
stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  forget_child "$pid"
}

cleanup() {
  local rc=$? i
  trap - EXIT INT TERM
  # Newest first: samplers and clients before the servers they watch or call.
  for ((i = ${#CHILDREN[@]} - 1; i >= 0; i--)); do stop_pid "${CHILDREN[i]}"; done
  if ((rc == 0)) && [[ ${BENCH_KEEP:-0} != 1 ]]; then
    rm -rf "$WORK"
  elif ((rc == 0)); then
    log "logs kept in $WORK (BENCH_KEEP=1)"
  else
    log "failed (exit $rc); logs kept in $WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

json_int() { sed -n "s/.*\"$2\": *\([0-9][0-9]*\).*/\1/p" "$1"; }

# A free loopback port (the kernel's pick, released at once): for nginx and
# haproxy, which cannot report the port they bound.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# wait_port_file FILE PID LOG: up to 10 s for FILE while PID lives.
wait_port_file() {
  local i
  for ((i = 0; i < 100; i++)); do
    [[ -s $1 ]] && return 0
    kill -0 "$2" 2>/dev/null || die "process $2 exited before listening; see $3"
    sleep 0.1
  done
  die "no port file $1 after 10 s; see $3"
}

# run_bounded SECONDS OUT CMD...: runs CMD with stdout to OUT, killed after SECONDS.
# Backgrounded and waited for, so an interrupt reaches the trap at once.
run_bounded() {
  local limit=$1 out=$2 rc=0
  shift 2
  timeout --kill-after=5 "$limit" "$@" >"$out" 2>>"$WORK/bench-client.log" &
  local pid=$!
  CHILDREN+=("$pid")
  wait "$pid" || rc=$?
  forget_child "$pid"
  return "$rc"
}

# wait_routes PORT PID LOG WHAT: up to 50 tries (about 30 s) until one Config call
# through 127.0.0.1:PORT succeeds.
wait_routes() {
  local port=$1 pid=$2 logfile=$3 what=$4 i
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || die "$what exited; see $logfile"
    if run_bounded 20 "$WORK/probe.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$port" \
      --count 1 --concurrency 1 && grep -q '"errors":0' "$WORK/probe.json"; then
      return 0
    fi
    sleep 0.2
  done
  die "$what does not route to the fake after 50 tries; see $logfile"
}

start_fake() {
  "$BUILD/scg-fake-spark" --listen 127.0.0.1:0 --ui-listen 127.0.0.1:0 --name bench \
    --port-file "$WORK/fake.ports" >"$WORK/fake.log" 2>&1 &
  FAKE_PID=$!
  CHILDREN+=("$FAKE_PID")
  wait_port_file "$WORK/fake.ports" "$FAKE_PID" "$WORK/fake.log"
  FAKE_PORT=$(json_int "$WORK/fake.ports" grpc)
  FAKE_UI_PORT=$(json_int "$WORK/fake.ports" ui)
  [[ -n $FAKE_PORT && -n $FAKE_UI_PORT ]] || die "unreadable $WORK/fake.ports"
}

# start_scg TAG [YAML...]: an scg ($SCG_EXE, default $BUILD/scg) in front of the
# fake, with extra YAML lines (a cluster: block). Sets STARTED_PID and
# STARTED_{GRPC,ADMIN,CLUSTER}_PORT; does not wait for routing (a cluster replica
# routes only once its peers are up).
start_scg() {
  local tag=$1
  shift
  {
    cat <<EOF
bind_addr: "127.0.0.1:0"
admin_addr: "127.0.0.1:0"
admin: { allow_unauthenticated: true }   # loopback demo: the admin API open, no tokens
backends:
  - { name: bench, address: "127.0.0.1:$FAKE_PORT", ui_url: "http://127.0.0.1:$FAKE_UI_PORT" }
logging: { level: warn }
EOF
    printf '%s\n' "$@"
    # Extra top-level YAML for every scg of the run, to compare a setting
    # side by side (BENCH_SCG_YAML='limits: { sched_slice_us: 0 }').
    [[ -z ${BENCH_SCG_YAML:-} ]] || printf '%s\n' "$BENCH_SCG_YAML"
  } >"$WORK/$tag.yaml"
  rm -f "$WORK/$tag.ports" # a tag started again (the rejoining replica) must not read its last ports
  "${SCG_EXE:-$BUILD/scg}" --config "$WORK/$tag.yaml" --port-file "$WORK/$tag.ports" >"$WORK/$tag.log" 2>&1 &
  STARTED_PID=$!
  CHILDREN+=("$STARTED_PID")
  wait_port_file "$WORK/$tag.ports" "$STARTED_PID" "$WORK/$tag.log"
  STARTED_GRPC_PORT=$(json_int "$WORK/$tag.ports" grpc)
  STARTED_ADMIN_PORT=$(json_int "$WORK/$tag.ports" admin)
  STARTED_CLUSTER_PORT=$(json_int "$WORK/$tag.ports" cluster)
  [[ -n $STARTED_GRPC_PORT ]] || die "unreadable $WORK/$tag.ports"
}

# start_gateway TAG: a single scg replica, once it routes a call. Sets SCG_PID, SCG_PORT.
start_gateway() {
  start_scg "$1"
  SCG_PID=$STARTED_PID SCG_PORT=$STARTED_GRPC_PORT
  wait_routes "$SCG_PORT" "$SCG_PID" "$WORK/$1.log" scg
}

# start_before: the BENCH_SCG_BEFORE binary, started as start_gateway starts scg.
# Sets BEFORE_PID, BEFORE_PORT.
start_before() {
  SCG_EXE=$SCG_BEFORE start_scg before ${BENCH_BEFORE_YAML:+"$BENCH_BEFORE_YAML"}
  BEFORE_PID=$STARTED_PID BEFORE_PORT=$STARTED_GRPC_PORT
  wait_routes "$BEFORE_PORT" "$BEFORE_PID" "$WORK/before.log" "scg (before)"
}

# nginx as gRPC proxy, tuned as docs/performance.md ("Running the benchmark") says. Its
# prefix, pid, error log, lock and temp paths are all in $WORK: it writes nothing
# under /etc, /var or /run, and runs in the foreground as our child (as the
# current user: when that is root, `user` keeps the workers root too, since they
# could not otherwise read $WORK). worker_processes auto (2 here): scg and
# haproxy may use both CPUs, so nginx may too; at c=1 only one worker is busy.
start_nginx() {
  local dir=$WORK/nginx user_line=""
  mkdir -p "$dir/tmp"
  NGINX_PORT=$(free_port)
  (($(id -u) == 0)) && user_line="user $(id -un) $(id -gn);"
  cat >"$dir/nginx.conf" <<EOF
$user_line
worker_processes auto;
worker_rlimit_nofile 16384;
pid $dir/nginx.pid;
lock_file $dir/nginx.lock;
error_log $dir/error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path $dir/tmp/body;
  proxy_temp_path $dir/tmp/proxy;
  fastcgi_temp_path $dir/tmp/fastcgi;
  uwsgi_temp_path $dir/tmp/uwsgi;
  scgi_temp_path $dir/tmp/scgi;
  keepalive_requests 10000000;    # the default 1000 sends GOAWAY every 1000 streams
  keepalive_timeout 600s;
  http2_max_concurrent_streams 1024;
  client_max_body_size 0;
  upstream fake {
    server 127.0.0.1:$FAKE_PORT;
    keepalive 512;                # nginx uses one backend connection per call in flight
    keepalive_requests 10000000;
    keepalive_timeout 600s;
  }
  server {
    listen 127.0.0.1:$NGINX_PORT http2 reuseport;
    location / {
      grpc_pass grpc://fake;
      grpc_buffer_size 1m;
      grpc_read_timeout 600s;
      grpc_send_timeout 600s;
    }
  }
}
EOF
  nginx -p "$dir/" -c "$dir/nginx.conf" -e "$dir/error.log" -g 'daemon off;' >"$dir/stdout.log" 2>&1 &
  NGINX_PID=$!
  CHILDREN+=("$NGINX_PID")
  wait_routes "$NGINX_PORT" "$NGINX_PID" "$dir/error.log" nginx
  # The workers: stopped with the master, listed so that a stray one is stopped too.
  NGINX_PIDS=("$NGINX_PID")
  local worker
  for worker in $(pgrep -P "$NGINX_PID"); do
    NGINX_PIDS+=("$worker")
    CHILDREN=("$worker" "${CHILDREN[@]}") # stopped after the master
  done
  log "nginx $(nginx -v 2>&1 | sed 's/.*\///') on 127.0.0.1:$NGINX_PORT, pids ${NGINX_PIDS[*]}"
}

# HAProxy with HTTP/2 cleartext on both sides, tuned likewise: 1024 streams per
# connection, backend connections multiplexed and always reused, a 1 MiB HTTP/2
# window (as nginx's grpc_buffer_size), 64 KiB buffers, two threads (as many as
# CPUs, like nginx's workers), long timeouts, no logging. Foreground, our child.
start_haproxy() {
  local dir=$WORK/haproxy
  mkdir -p "$dir"
  HAPROXY_PORT=$(free_port)
  cat >"$dir/haproxy.cfg" <<EOF
global
  nbthread 2
  maxconn 8000
  tune.bufsize 65536
  tune.h2.max-concurrent-streams 1024
  tune.h2.initial-window-size 1048576
  pidfile $dir/haproxy.pid

defaults
  mode http
  timeout connect 5s
  timeout client 600s
  timeout server 600s
  timeout http-keep-alive 600s
  http-reuse always

frontend grpc_in
  bind 127.0.0.1:$HAPROXY_PORT proto h2
  default_backend fake

backend fake
  server fake 127.0.0.1:$FAKE_PORT proto h2
EOF
  haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
  HAPROXY_PID=$!
  CHILDREN+=("$HAPROXY_PID")
  wait_routes "$HAPROXY_PORT" "$HAPROXY_PID" "$dir/haproxy.log" haproxy
  log "haproxy $(haproxy -v | sed -n '1s/HAProxy version \([^ ]*\).*/\1/p') on 127.0.0.1:$HAPROXY_PORT, pid $HAPROXY_PID"
}

# -------------------------------------------------------------- measurements

# CPU ticks (utime + stime) of PID, 0 once it is gone.
proc_ticks() {
  local stat fields
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || {
    echo 0
    return
  }
  read -r -a fields <<<"${stat##*) }" # fields[0] is field 3 (state)
  echo $((fields[11] + fields[12]))
}

# The processes of a path's middle box (none for direct).
middle_pids() {
  case $1 in
    scg) echo "$SCG_PID" ;;
    before) echo "$BEFORE_PID" ;;
    nginx) echo "${NGINX_PIDS[*]}" ;;
    haproxy) echo "$HAPROXY_PID" ;;
  esac
}

# CPU ticks of a path's middle box, all its processes.
middle_ticks() {
  local sum=0 pid
  for pid in $(middle_pids "$1"); do sum=$((sum + $(proc_ticks "$pid"))); done
  echo "$sum"
}

path_port() {
  case $1 in
    direct) echo "$FAKE_PORT" ;;
    scg) echo "$SCG_PORT" ;;
    before) echo "$BEFORE_PORT" ;;
    nginx) echo "$NGINX_PORT" ;;
    haproxy) echo "$HAPROXY_PORT" ;;
  esac
}

# Busy ticks of the whole machine, all CPUs.
box_busy_ticks() {
  local user nice system irq softirq steal
  read -r _ user nice system _ _ irq softirq steal _ </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

# Ticks all CPUs waited for the host (steal): a slow window beside a large
# steal was the host's doing, not scg's.
steal_ticks() {
  local steal
  read -r _ _ _ _ _ _ _ _ steal _ </proc/stat
  echo "$steal"
}

ticks_to_s() { awk -v t="$1" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }'; }

# status_kib KEY PID...: the sum of a /proc/PID/status field (VmRSS, VmHWM) in KiB.
status_kib() {
  local key=$1 sum=0 pid value
  shift
  for pid in "$@"; do
    value=$(awk -v key="$key:" '$1 == key { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    sum=$((sum + ${value:-0}))
  done
  echo "$sum"
}

# Config calls the fake has answered (its own count, to check the client's); empty
# if the fake does not answer.
fake_config_calls() {
  { curl -s --max-time 5 "http://127.0.0.1:$FAKE_UI_PORT/fake/stats" || true; } |
    sed -n 's/.*"Config":\([0-9]*\).*/\1/p'
}

now_s() { date +%s.%N; }

# sample_rss OUT PID...: writes the highest summed VmRSS (KiB) of the PIDs to OUT
# every 0.2 s until the first PID is gone or this is stopped; at most 2 h.
sample_rss() {
  local out=$1 max=0 rss i
  shift
  for ((i = 0; i < 36000; i++)); do
    [[ -r /proc/$1/status ]] || return 0
    rss=$(status_kib VmRSS "$@")
    if ((rss > max)); then
      max=$rss
      echo "$max" >"$out"
    fi
    sleep 0.2
  done
}

# Snapshot of the CPU counters around one run: sets M0/F0/B0/T0/C0 or M1/....
snapshot() {
  local path=$1 side=$2
  printf -v "M$side" '%s' "$(middle_ticks "$path")"
  printf -v "F$side" '%s' "$(proc_ticks "$FAKE_PID")"
  printf -v "B$side" '%s' "$(box_busy_ticks)"
  printf -v "T$side" '%s' "$(now_s)"
}

# cpu_fields PATH: the JSON fields of one run from the two snapshots and the
# fake's Config count before (CALLS0) and after (CALLS1).
cpu_fields() {
  local backend_calls=-1
  [[ -n $CALLS0 && -n $CALLS1 ]] && backend_calls=$((CALLS1 - CALLS0))
  printf '"middle_cpu_s":%s,"fake_cpu_s":%s,"box_busy_s":%s,"run_wall_s":%s,"backend_config_calls":%s' \
    "$(ticks_to_s $((M1 - M0)))" "$(ticks_to_s $((F1 - F0)))" "$(ticks_to_s $((B1 - B0)))" \
    "$(awk -v a="$T0" -v b="$T1" 'BEGIN { printf "%.3f", b - a }')" "$backend_calls"
}

# run_case KIND CASE LABEL PATH ROUND ARGS...: one scg-bench run against PATH,
# appended to the raw records with the CPU its middle box, the fake and the whole
# machine spent meanwhile.
run_case() {
  local kind=$1 name=$2 label=$3 path=$4 round=$5 limit out
  shift 5
  limit=$((WARMUP_SECS + UNARY_SECS + 60))
  [[ $kind == stream ]] && limit=660
  CALLS0=$(fake_config_calls)
  snapshot "$path" 0
  if ! run_bounded "$limit" "$WORK/run.json" "$BUILD/scg-bench" "$kind" --target "127.0.0.1:$(path_port "$path")" "$@"; then
    die "scg-bench $kind via $path failed: $(cat "$WORK/run.json") (see $WORK/bench-client.log)"
  fi
  snapshot "$path" 1
  CALLS1=$(fake_config_calls)
  out=$(<"$WORK/run.json")
  [[ $out == \{*\} ]] || die "scg-bench printed no JSON object: $out"
  printf '%s,"kind":"%s","case":"%s","label":"%s","path":"%s","round":%d,%s}\n' \
    "${out%\}}" "$kind" "$name" "$label" "$path" "$round" "$(cpu_fields "$path")" >>"$RAW"
  log "#$round $label $path: $out"
  if [[ $kind == unary ]] && ! [[ $out == *'"errors_total":0'* ]]; then
    log "WARNING: $label via $path had failed calls (see $WORK/bench-client.log)"
  fi
}

# run_h2load PATH ROUND: unary Config through h2load (nghttp2), the independent
# load generator: H2LOAD_CONCURRENCY calls in flight over 2 connections for
# UNARY_SECS. h2load counts a gRPC error as a success (the HTTP status is 200), so
# its count is checked against the fake's own count, loudly.
run_h2load() {
  local path=$1 round=$2 out="$WORK/h2load.out" streams=$((H2LOAD_CONCURRENCY / 2))
  run_bounded 20 "$WORK/frame.json" "$BUILD/scg-bench" frame-config --out "$WORK/config.frame" ||
    die "scg-bench frame-config failed"
  rm -f "$WORK/h2load.requests"
  CALLS0=$(fake_config_calls)
  snapshot "$path" 0
  # bash's `times` after h2load gives h2load's CPU (its children's line).
  run_bounded $((UNARY_SECS + 60)) "$out" bash -c '"$@"; rc=$?; times >"$0"; exit $rc' "$WORK/h2load.times" \
    h2load -D "$UNARY_SECS" -c 2 -m "$streams" -t 1 \
    -d "$WORK/config.frame" -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file="$WORK/h2load.requests" "http://127.0.0.1:$(path_port "$path")/spark.connect.SparkConnectService/Config" ||
    die "h2load via $path failed: $(tail -5 "$out")"
  snapshot "$path" 1
  CALLS1=$(fake_config_calls)
  local rps started completed ok failed errored timeouts p50 p99
  rps=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$out")
  read -r started completed ok failed errored timeouts < <(sed -n \
    's/^requests: [0-9]* total, \([0-9]*\) started, \([0-9]*\) done, \([0-9]*\) succeeded, \([0-9]*\) failed, \([0-9]*\) errored, \([0-9]*\) timeout.*/\1 \2 \3 \4 \5 \6/p' "$out")
  [[ -n $rps && -n $ok ]] || die "unreadable h2load output: $(cat "$out")"
  local client_cpu
  client_cpu=$(awk 'NR == 2 { n = 0; for (i = 1; i <= 2; i++) { split($i, t, /[ms]/); n += t[1] * 60 + t[2] }
    printf "%.3f", n }' "$WORK/h2load.times")
  # Latency of the successful requests, from h2load's per-request log (µs, third column).
  read -r p50 p99 < <(awk -F'\t' '$2 == 200 { print $3 }' "$WORK/h2load.requests" | sort -n |
    awk '{ v[NR] = $1 } END { if (NR == 0) { print 0, 0; exit }
      i = int(NR * 0.5 + 0.999999); j = int(NR * 0.99 + 0.999999); print v[i], v[j] }')
  printf '{"rps":%s,"rpcs":%d,"errors":%d,"p50_us":%d,"p99_us":%d,"concurrency":%d,"seconds":%d,"rpcs_total":%d,"started":%d,"client_cpu_s":%s,"process_cpu_s":%s,"kind":"h2load","case":"h2load_c%d","label":"h2load c=%d","path":"%s","round":%d,%s}\n' \
    "$rps" "$ok" $((failed + errored + timeouts)) "$p50" "$p99" "$H2LOAD_CONCURRENCY" "$UNARY_SECS" "$completed" "$started" "${client_cpu:-0}" "${client_cpu:-0}" \
    "$H2LOAD_CONCURRENCY" "$H2LOAD_CONCURRENCY" "$path" "$round" "$(cpu_fields "$path")" >>"$RAW"
  log "#$round h2load c=$H2LOAD_CONCURRENCY $path: $rps req/s, $ok succeeded, $((failed + errored + timeouts)) failed, p50 ${p50} µs, p99 ${p99} µs; backend counted $((CALLS1 - CALLS0))"
  if [[ -n $CALLS0 && -n $CALLS1 ]] && ((CALLS1 - CALLS0 < ok)); then
    log "!!!!!!!! MISMATCH: h2load via $path counted $ok successes but the backend answered only $((CALLS1 - CALLS0)) Config calls: h2load is counting gRPC errors as successes"
  fi
}

# ------------------------------------------------------------------- phases

start_servers() {
  start_fake
  start_gateway scg
  log "fake on 127.0.0.1:$FAKE_PORT (pid $FAKE_PID), scg on 127.0.0.1:$SCG_PORT (pid $SCG_PID)"
  if path_selected before; then
    start_before
    log "before ($SCG_BEFORE, $SCG_BEFORE_BINARY) on 127.0.0.1:$BEFORE_PORT (pid $BEFORE_PID)"
  fi
  [[ " ${PATHS[*]} " == *" nginx "* ]] && start_nginx
  [[ " ${PATHS[*]} " == *" haproxy "* ]] && start_haproxy
  return 0
}

# What scg costs doing nothing (its timers and thread pools), before any load.
measure_idle() {
  local secs=5 t0 t1 cores
  t0=$(proc_ticks "$SCG_PID")
  sleep "$secs"
  t1=$(proc_ticks "$SCG_PID")
  cores=$(awk -v t=$((t1 - t0)) -v hz="$CLK_TCK" -v s="$secs" 'BEGIN { printf "%.3f", t / hz / s }')
  echo "{\"kind\":\"idle\",\"scg_idle_cores\":$cores,\"seconds\":$secs}" >>"$RAW"
  log "scg idle for ${secs}s: $cores cores"
}

# The rounds: every workload on every path, the order of the paths rotating from
# round to round so that drift over a round favours none.
load_rounds() {
  local round i repeat path concurrency order
  local warm_bytes=$((STREAM_BYTES < (256 << 20) ? STREAM_BYTES : 256 << 20))
  local stream_label="stream $((STREAM_BYTES >> 20)) MiB / $((MESSAGE_BYTES >> 20)) MiB msgs"
  # The first large stream a process serves is slower (its allocator adapts to the
  # big messages): warm every path up once, unmeasured.
  if workload stream; then
    for path in "${PATHS[@]}"; do
      run_bounded 660 "$WORK/warm.json" "$BUILD/scg-bench" stream --target "127.0.0.1:$(path_port "$path")" \
        --bytes "$warm_bytes" --message-bytes "$MESSAGE_BYTES" || die "warm-up stream via $path failed"
    done
  fi
  for ((round = 1; round <= ROUNDS; round++)); do
    order=()
    for ((i = 0; i < ${#PATHS[@]}; i++)); do order+=("${PATHS[(i + round - 1) % ${#PATHS[@]}]}"); done
    log "round $round of $ROUNDS: ${order[*]}"
    if workload unary; then
      for concurrency in "${UNARY_CONCURRENCIES[@]}"; do
        for path in "${order[@]}"; do
          run_case unary "unary_c$concurrency" "unary c=$concurrency" "$path" "$round" \
            --concurrency "$concurrency" --duration-secs "$UNARY_SECS" --warmup-secs "$WARMUP_SECS"
        done
      done
    fi
    if workload h2load; then
      for path in "${order[@]}"; do run_h2load "$path" "$round"; done
    fi
    # A stream is short: several samples per round, each path once per sample, so
    # that a burst of foreign load spoils one sample, not a round.
    if workload stream; then
      for ((repeat = 1; repeat <= STREAM_REPEATS; repeat++)); do
        for path in "${order[@]}"; do
          run_case stream stream "$stream_label" "$path" $(((round - 1) * STREAM_REPEATS + repeat)) \
            --bytes "$STREAM_BYTES" --message-bytes "$MESSAGE_BYTES"
        done
      done
    fi
  done
}

# Peak memory of each middle box over the rounds: sampled VmRSS and the kernel's VmHWM.
declare -A SAMPLER_PIDS=()
start_rss_samplers() {
  local path pids
  for path in "${PATHS[@]}"; do
    [[ $path == direct ]] && continue
    read -r -a pids <<<"$(middle_pids "$path")"
    sample_rss "$WORK/rss-$path.max" "${pids[@]}" &
    SAMPLER_PIDS[$path]=$!
    CHILDREN+=("$!")
  done
}

stop_rss_samplers() {
  local path pids max hwm
  for path in "${!SAMPLER_PIDS[@]}"; do
    stop_pid "${SAMPLER_PIDS[$path]}"
    read -r -a pids <<<"$(middle_pids "$path")"
    max=$(cat "$WORK/rss-$path.max" 2>/dev/null || echo 0)
    hwm=$(status_kib VmHWM "${pids[@]}")
    echo "{\"kind\":\"memory\",\"path\":\"$path\",\"max_rss_kib\":$max,\"hwm_kib\":$hwm}" >>"$RAW"
    log "$path RSS under load: sampled max $max KiB, VmHWM $hwm KiB"
  done
}

# Stalled readers (BENCH_STALLED): for each N, on a fresh scg, scg-bench stalled
# opens N raw HTTP/2 connections that each start an ExecutePlan of endless
# MESSAGE_BYTES messages and never read, then runs well-behaved load beside them
# for UNARY_SECS (unary Config at c=32 with a 2 s deadline per call, and one
# stream reader of 256 MiB results). Each figure is set against N=0 of the same
# round, and scg's peak RSS against N x (stream window + one message) + its peak
# at N=0: the most scg may hold for clients that give back no window.
SCG_STREAM_WINDOW=$((4 << 20)) # net/h2/endpoints.hpp: tuning::stream_window
SCG_WORKERS=$(nproc)           # scg's workers: one per CPU (its config sets none)

# json_num FILE KEY: a number (or null) from a one-line JSON object.
json_num() { sed -n "s/.*\"$2\": *\(null\|-\{0,1\}[0-9][0-9.e+]*\).*/\1/p" "$1"; }

stalled_bench() {
  local round n tag out base_rps base_p99 base_mbs base_rss rps p99 mbs rss bound verdict
  if ! path_selected scg; then
    log "stalled readers: skipped (scg is not in BENCH_PATHS)"
    return 0
  fi
  for ((round = 1; round <= ROUNDS; round++)); do
    for n in "${STALLED[@]}"; do
      tag="scg-stalled-$n-r$round"
      ((n == 0)) && base_rps="" base_p99="" base_mbs="" base_rss=""
      stop_pid "$SCG_PID"
      start_gateway "$tag"
      CALLS0=$(fake_config_calls)
      snapshot scg 0
      if ! run_bounded $((WARMUP_SECS + UNARY_SECS + 120)) "$WORK/stalled.json" "$BUILD/scg-bench" stalled \
        --target "127.0.0.1:$SCG_PORT" --stalled "$n" --duration-secs "$UNARY_SECS" --warmup-secs "$WARMUP_SECS" \
        --concurrency "$STALLED_CONCURRENCY" --message-bytes "$MESSAGE_BYTES" --scg-pid "$SCG_PID" ||
        ! [[ $(<"$WORK/stalled.json") == \{*\} ]]; then
        log "WARNING: scg-bench stalled with N=$n failed (see $WORK/bench-client.log and $WORK/$tag.log)"
        printf '{"kind":"stalled","round":%d,"stalled":%d,"error":"scg-bench stalled failed or timed out"}\n' \
          "$round" "$n" >>"$RAW"
        continue
      fi
      snapshot scg 1
      CALLS1=$(fake_config_calls)
      out=$(<"$WORK/stalled.json")
      printf '%s,"kind":"stalled","case":"stalled","round":%d,"path":"scg","stream_window_bytes":%d,%s}\n' \
        "${out%\}}" "$round" "$SCG_STREAM_WINDOW" "$(cpu_fields scg)" >>"$RAW"
      rps=$(json_num "$WORK/stalled.json" rps) p99=$(json_num "$WORK/stalled.json" p99_us)
      mbs=$(json_num "$WORK/stalled.json" mb_per_s) rss=$(json_int "$WORK/stalled.json" rss_max_kib)
      if ((n == 0)); then
        base_rps=$rps base_p99=$p99 base_mbs=$mbs base_rss=$rss
        log "#$round stalled readers N=0 (baseline): unary $rps calls/s, p99 $(p99_text "$p99");" \
          "stream $mbs MB/s; scg RSS max $(mib $((rss * 1024))) MiB"
        continue
      fi
      log "#$round stalled readers N=$n: unary $rps calls/s ($(ratio "$rps" "$base_rps") × N=0)," \
        "p99 $(p99_text "$p99") ($(ratio "$p99" "$base_p99") × N=0), $(json_int "$WORK/stalled.json" errors) failed" \
        "($(json_int "$WORK/stalled.json" timeouts) timed out); stream $mbs MB/s ($(ratio "$mbs" "$base_mbs") × N=0);" \
        "$(json_int "$WORK/stalled.json" stalled_started)/$n stalled streams started," \
        "$(json_int "$WORK/stalled.json" stalled_open_at_end) still open at the end"
      # The bound scg's docs promise (docs/architecture.md): N x (stream window +
      # one response message, read whole when it is larger than the window) +
      # workers x 1.25 MiB of read buffers + RSS at N=0.
      if [[ -z $base_rss ]]; then
        log "#$round stalled readers N=$n: scg RSS max $(mib $((rss * 1024))) MiB; no N=0 run this round to bound it"
        continue
      fi
      bound=$((n * (SCG_STREAM_WINDOW + MESSAGE_BYTES) / 1024 + SCG_WORKERS * 1280 + base_rss))
      verdict=within
      ((rss <= bound)) || verdict=OVER
      log "#$round stalled readers N=$n: scg RSS max $(mib $((rss * 1024))) MiB; bound $n × ($(mib "$SCG_STREAM_WINDOW") MiB" \
        "stream window + $(mib "$MESSAGE_BYTES") MiB message) + $SCG_WORKERS × 1.25 MiB read buffers" \
        "+ $(mib $((base_rss * 1024))) MiB at N=0" \
        "= $(mib $((bound * 1024))) MiB: $verdict"
    done
  done
}

# ratio A B: A / B with two decimals; "–" unless both are numbers and B is not 0.
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { num = "^-?[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$"
    if (a !~ num || b !~ num || b + 0 == 0) print "–"; else printf "%.2f", a / b }'
}
p99_text() { if [[ $1 == null || -z $1 ]]; then echo "none (no call succeeded)"; else echo "$1 µs"; fi; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# Idle sessions on a fresh scg: after the load phase the allocator holds freed
# stream buffers that new sessions would reuse, hiding their cost.
idle_sessions() {
  local before after out
  stop_pid "$SCG_PID"
  start_gateway scg-sessions
  run_bounded 120 "$WORK/warm.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$SCG_PORT" \
    --count "$SESSION_WARMUP" --concurrency "$SESSION_CONCURRENCY" || die "session warm-up failed"
  sleep 1
  before=$(status_kib VmRSS "$SCG_PID")
  run_bounded 600 "$WORK/sessions.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$SCG_PORT" \
    --count "$SESSIONS" --concurrency "$SESSION_CONCURRENCY" || die "opening $SESSIONS sessions failed"
  sleep 2
  after=$(status_kib VmRSS "$SCG_PID")
  out=$(<"$WORK/sessions.json")
  echo "${out%\}},\"kind\":\"sessions\",\"rss_before_kib\":$before,\"rss_after_kib\":$after}" >>"$RAW"
  log "sessions: $out; scg RSS $before -> $after KiB"
  stop_pid "$SCG_PID"
}

admin_get() { curl -s --max-time 2 "http://127.0.0.1:$1$2" || true; }

# The replica's live heap (scg_process_heap_allocated_bytes); null without jemalloc.
heap_bytes() {
  local v
  v=$(admin_get "$1" /metrics | sed -n 's/^scg_process_heap_allocated_bytes \([0-9]*\).*/\1/p')
  echo "${v:-null}"
}

# Sessions in replica's replicated table (scg_sessions_active on /metrics); empty if unreadable.
replica_sessions() { admin_get "$1" /metrics | sed -n 's/^scg_sessions_active \([0-9]*\).*/\1/p'; }

# wait_mesh ADMIN_PORT...: up to 30 s until every replica is ready and sees all
# the others up.
wait_mesh() {
  local i port body up all
  for ((i = 0; i < 150; i++)); do
    all=1
    for port in "$@"; do
      body=$(admin_get "$port" /api/v1/cluster)
      up=$(grep -o '"status":"[a-z]*"' <<<"$body" | grep -vc '"down"' || true)
      [[ $up == "$#" && $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$port/readyz") == 200 ]] || all=0
    done
    ((all)) && return 0
    sleep 0.2
  done
  return 1
}

# bytes_received PID PORT...: bytes PID's TCP sockets received on connections
# whose local or peer port is one of PORT (the kernel's tcp_info, through ss).
bytes_received() {
  local pid=$1
  shift
  ss -tinpH state established | awk -v pid="pid=$pid," -v ports=" $* " '
    /^[^ \t]/ { n = split($3, l, ":"); m = split($4, p, ":")
                mine = index($0, pid) > 0 && (index(ports, " " l[n] " ") || index(ports, " " p[m] " ")); next }
    mine && match($0, /bytes_received:[0-9]+/) { sum += substr($0, RSTART + 15, RLENGTH - 15) }
    END { print sum + 0 }'
}

# delay_buckets ADMIN_PORT [HISTOGRAM]: the replica's buckets of HISTOGRAM
# (default scg_cluster_replication_delay_seconds) as a JSON array of
# [le, cumulative count].
delay_buckets() {
  local name=${2:-scg_cluster_replication_delay_seconds}
  printf '[%s]' "$(admin_get "$1" /metrics |
    sed -n "s/^${name}_bucket{le=\"\([^\"]*\)\"} \([0-9]*\)\$/[\"\1\",\2]/p" | paste -sd,)"
}

# slow_decisions ADMIN_PORT: until killed, every 0.1 s, the wall time and
# how many of the replica's placement decisions took over 10 ms so far.
slow_decisions() {
  local m
  while :; do
    m=$(admin_get "$1" /metrics | awk '/^scg_router_decision_seconds_bucket\{le="0.010000"\}/ { le = $2 }
      /^scg_router_decision_seconds_count/ { n = $2 } END { print n - le }')
    echo "$(now_s) $m"
    sleep 0.1
  done
}

# decisions PHASE ADMIN_PORT GRPC_PORT CMD...: DECISION_RATE new sessions/s for
# DECISION_SECS through one replica while CMD runs (or only the load, when CMD
# is "-"), with that replica's scg_router_decision_seconds and
# scg_cluster_refresh_pass_seconds buckets before and after, as a "decisions"
# record: how long placement waited while the cluster actor was busy.
decisions() {
  local phase=$1 admin=$2 port=$3 secs=$DECISION_SECS load_pid d0 d1 r0 r1 o0 o1 sampler_pid="" t_start
  shift 3
  [[ $phase == refresh ]] && ((secs < REFRESH_WINDOW_SECS)) && secs=$REFRESH_WINDOW_SECS
  d0=$(delay_buckets "$admin" scg_router_decision_seconds) r0=$(delay_buckets "$admin" scg_cluster_refresh_pass_seconds)
  o0=$(delay_buckets "$admin" scg_router_owner_answer_seconds)
  timeout --kill-after=5 300 "$BUILD/scg-bench" sessions --target "127.0.0.1:$port" \
    --count $((DECISION_RATE * secs)) --rate "$DECISION_RATE" --concurrency 16 \
    >"$WORK/decisions-$phase.json" 2>>"$WORK/bench-client.log" &
  load_pid=$!
  CHILDREN+=("$load_pid")
  if ((SAMPLE_SLOW)); then
    t_start=$(now_s)
    slow_decisions "$admin" >"$WORK/slow-$phase.txt" &
    sampler_pid=$!
    CHILDREN+=("$sampler_pid")
  fi
  DECISIONS_MARK="" DECISIONS_MARK_REFRESH="" DECISIONS_MARK_OWNER=""
  [[ $1 == - ]] || "$@"
  wait "$load_pid" || die "the decision load ($phase) failed: $(cat "$WORK/decisions-$phase.json")"
  forget_child "$load_pid"
  if [[ -n $sampler_pid ]]; then
    kill "$sampler_pid" 2>/dev/null || true
    wait "$sampler_pid" 2>/dev/null || true
    forget_child "$sampler_pid"
    log "decisions over 10 ms during $phase, seconds after the load's start at $(date -d "@$t_start" +%T.%N | cut -c1-12) (+count): $(awk -v t0="$t_start" '
      NF == 2 && $2 != "" { if (seen && $2 > last) printf "%.1f(+%d) ", $1 - t0, $2 - last; last = $2; seen = 1 }' \
      "$WORK/slow-$phase.txt")"
  fi
  d1=$(delay_buckets "$admin" scg_router_decision_seconds) r1=$(delay_buckets "$admin" scg_cluster_refresh_pass_seconds)
  o1=$(delay_buckets "$admin" scg_router_owner_answer_seconds)
  printf '{"kind":"decisions","phase":"%s","entries":%d,"rate":%d,"sessions":%d,"errors":%d,"before":[%s],"after":[%s],"refresh_before":[%s],"refresh_after":[%s],"owner_before":[%s],"owner_after":[%s]}\n' \
    "$phase" "$(replica_sessions "$admin")" "$DECISION_RATE" $((DECISION_RATE * secs)) \
    "$(json_int "$WORK/decisions-$phase.json" errors)" "$d0" "$d1" "$r0" "$r1" "$o0" "$o1" >>"$RAW"
  # CMD may mark the end of what it measures (the sync: the joiner ready):
  # the decisions from the load's start to that mark, as phase PHASE_only.
  if [[ -n $DECISIONS_MARK ]]; then
    printf '{"kind":"decisions","phase":"%s_only","entries":%d,"rate":%d,"sessions":%d,"errors":%d,"before":[%s],"after":[%s],"refresh_before":[%s],"refresh_after":[%s],"owner_before":[%s],"owner_after":[%s]}\n' \
      "$phase" "$(replica_sessions "$admin")" "$DECISION_RATE" $((DECISION_RATE * secs)) \
      "$(json_int "$WORK/decisions-$phase.json" errors)" "$d0" "$DECISIONS_MARK" "$r0" "$DECISIONS_MARK_REFRESH" \
      "$o0" "$DECISIONS_MARK_OWNER" >>"$RAW"
  fi
  log "decisions during $phase: $(cat "$WORK/decisions-$phase.json")"
}

# open_sessions TAG GRPC_PORT COUNT [--rate R]: COUNT new sessions through one
# replica (scg-bench sessions), its JSON line in $WORK/TAG.json; dies on failure
# or after 600 s plus 1 s per thousand sessions.
open_sessions() {
  local tag=$1 port=$2 count=$3
  shift 3
  run_bounded $((600 + count / 1000)) "$WORK/$tag.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$port" --count "$count" \
    --concurrency "$SESSION_CONCURRENCY" "$@" || die "opening $count sessions ($tag) failed: $(cat "$WORK/$tag.json")"
}

# wait_sessions ADMIN_PORT N: up to 120 s until the replica holds N sessions;
# prints the seconds waited, or nothing when it never did.
wait_sessions() {
  local i n t0
  t0=$(now_s)
  for ((i = 0; i < 2400; i++)); do
    n=$(replica_sessions "$1")
    if [[ -n $n ]] && ((n >= $2)); then
      awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.3f", b - a }'
      return 0
    fi
    sleep 0.05
  done
}

# The cluster (issue #3), REPLICAS scg replicas with a cluster: block and one fake:
#  1. visibility: REPL_RATE new sessions/s on replica 1 for REPL_RATE_SECS; the
#     other replicas' scg_cluster_replication_delay_seconds histograms (write at
#     the owner -> arrival) before and after;
#  2. rate: REPL_SESSIONS new sessions at full speed on replica 1, and how long
#     until replica 2 holds them all;
#  3. full sync: sessions opened until the table holds SYNC_ENTRIES, then one
#     more replica, seeded from replica 1, joins: time from its start to ready,
#     bytes it received from peers until then, and its RSS over the RSS replica 2
#     had when it had just joined the empty cluster; then it stops, and joins
#     again under the same name, SYNC_REPEATS times in all;
#  4. decisions: DECISION_RATE new sessions/s on replica 1 (the seed) for
#     DECISION_SECS at full size, once with nothing else going on (its refresh
#     pass over the whole table starts every 37.5 s, a sixteenth of the
#     operation ttl, so this window lasts REFRESH_WINDOW_SECS, 40 s, and the
#     report says how many passes ran in it), once while the joining
#     replica of step 3 syncs from it, and once while a busy loop runs on
#     every core (a control: the cost of waiting for a CPU alone); the wait
#     for each placement decision.
cluster_bench() {
  local r pids=() admins=() cports=() grpc1="" seed="" base n t0 t_seen open_s complete=true before=() after=() empty_rss empty_heap
  local ttl=()
  [[ -n $CLUSTER_SESSION_TTL ]] && ttl=("affinity: { session_ttl_secs: $CLUSTER_SESSION_TTL }")
  for ((r = 1; r <= REPLICAS; r++)); do
    start_scg "replica-$r" "${ttl[@]}" "cluster:" "  node_name: bench-$r" '  bind_addr: "127.0.0.1:0"' \
      "  seeds: [${seed}]" "  sync_wait_secs: 3"
    pids+=("$STARTED_PID")
    admins+=("$STARTED_ADMIN_PORT")
    cports+=("$STARTED_CLUSTER_PORT")
    [[ -z $seed ]] && seed="\"127.0.0.1:$STARTED_CLUSTER_PORT\"" grpc1=$STARTED_GRPC_PORT
  done
  if ! wait_mesh "${admins[@]}"; then
    log "WARNING: the $REPLICAS replicas did not form a cluster within 30 s; no cluster figures (see $WORK/replica-*.log)"
    for r in "${pids[@]}"; do stop_pid "$r"; done
    return 0
  fi
  wait_routes "$grpc1" "${pids[0]}" "$WORK/replica-1.log" "replica 1"
  sleep 1
  empty_rss=$(status_kib VmRSS "${pids[1]}") empty_heap=$(heap_bytes "${admins[1]}")

  # 1. Visibility delay at a steady rate.

  for ((r = 0; r < REPLICAS; r++)); do before+=("$(delay_buckets "${admins[r]}")"); done
  open_sessions repl-rate "$grpc1" $((REPL_RATE * REPL_RATE_SECS)) --rate "$REPL_RATE"
  sleep 0.5
  for ((r = 0; r < REPLICAS; r++)); do after+=("$(delay_buckets "${admins[r]}")"); done
  printf '{"kind":"replication_delay","replicas":%d,"rate":%d,"sessions":%d,"errors":%d,"open_s":%s,"before":[%s],"after":[%s]}\n' \
    "$REPLICAS" "$REPL_RATE" $((REPL_RATE * REPL_RATE_SECS)) "$(json_int "$WORK/repl-rate.json" errors)" \
    "$(json_seconds "$WORK/repl-rate.json")" "$(IFS=,; echo "${before[*]}")" "$(IFS=,; echo "${after[*]}")" >>"$RAW"
  log "replication delay at $REPL_RATE sessions/s: $(cat "$WORK/repl-rate.json")"

  # 2. Bindings per second at full speed.
  base=$(replica_sessions "${admins[1]}")
  [[ -n $base ]] || die "replica 2 has no scg_sessions_active in /metrics"
  t0=$(now_s)
  timeout --kill-after=5 300 "$BUILD/scg-bench" sessions --target "127.0.0.1:$grpc1" --count "$REPL_SESSIONS" \
    --concurrency "$SESSION_CONCURRENCY" >"$WORK/repl.json" 2>>"$WORK/bench-client.log" &
  local bench_pid=$!
  CHILDREN+=("$bench_pid")
  t_seen=$(wait_sessions "${admins[1]}" $((base + REPL_SESSIONS)))
  wait "$bench_pid" || die "opening sessions on replica 1 failed: $(cat "$WORK/repl.json")"
  forget_child "$bench_pid"
  n=$(replica_sessions "${admins[1]}")
  if [[ -z $t_seen ]]; then
    complete=false t_seen=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.3f", b - a }')
    log "WARNING: replica 2 showed $((n - base)) of $REPL_SESSIONS new bindings after 120 s"
  fi
  open_s=$(json_seconds "$WORK/repl.json")
  printf '{"kind":"replication","replicas":%d,"sessions":%d,"errors":%d,"open_s":%s,"visible_s":%s,"seen":%d,"complete":%s}\n' \
    "$REPLICAS" "$REPL_SESSIONS" "$(json_int "$WORK/repl.json" errors)" "$open_s" "$t_seen" "$((n - base))" "$complete" >>"$RAW"
  log "replication: $(cat "$WORK/repl.json"); replica 2 saw $((n - base)) new bindings after $t_seen s"

  # 3. A full sync of SYNC_ENTRIES bindings to a joining replica.
  n=$(replica_sessions "${admins[0]}")
  ((SYNC_ENTRIES > n)) && open_sessions sync-fill "$grpc1" $((SYNC_ENTRIES - n))
  n=$(replica_sessions "${admins[0]}")
  [[ -n $(wait_sessions "${admins[$((REPLICAS - 1))]}" "$n") ]] || log "WARNING: replica $REPLICAS never held all $n sessions"
  local joiner ready_s="" received total rss held i
  # 4 (first half). The seed's placement decisions during a refresh pass at
  # full size, with nothing else going on, then during the sync below.
  decisions refresh "${admins[0]}" "$grpc1" -
  local seed_ticks0 seed_sync_ticks="" joiner_sync_ticks="" steal0 steal_s
  join_replica() {
    t0=$(now_s)
    seed_ticks0=$(proc_ticks "${pids[0]}") steal0=$(steal_ticks)
    start_scg "replica-join" "${ttl[@]}" "cluster:" "  node_name: bench-join" '  bind_addr: "127.0.0.1:0"' \
      "  seeds: [\"127.0.0.1:${cports[0]}\"]" "  sync_wait_secs: 30"
    joiner=$STARTED_PID
    for ((i = 0; i < 3000; i++)); do
      if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$STARTED_ADMIN_PORT/readyz") == 200 ]]; then
        ready_s=$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.3f", b - a }')
        seed_sync_ticks=$(($(proc_ticks "${pids[0]}") - seed_ticks0)) joiner_sync_ticks=$(proc_ticks "$joiner")
        DECISIONS_MARK=$(delay_buckets "${admins[0]}" scg_router_decision_seconds)
        DECISIONS_MARK_REFRESH=$(delay_buckets "${admins[0]}" scg_cluster_refresh_pass_seconds)
        DECISIONS_MARK_OWNER=$(delay_buckets "${admins[0]}" scg_router_owner_answer_seconds)
        break
      fi
      sleep 0.01
    done
  }
  # The sync, SYNC_REPEATS times: the joiner (same name each time, as a
  # restarted pod) joins, syncs, is measured and stops.
  local k
  for ((k = 1; k <= SYNC_REPEATS; k++)); do
    decisions sync "${admins[0]}" "$grpc1" join_replica
    for ((r = 0; r < ${#pids[@]}; r++)); do alive_or_die "${pids[r]}" "replica $((r + 1))" "$WORK/replica-$((r + 1)).log"; done
    alive_or_die "$joiner" "the joining replica" "$WORK/replica-join.log"
    steal_s=$(ticks_to_s $(($(steal_ticks) - steal0)))
    received=$(bytes_received "$joiner" "${cports[@]}" "$STARTED_CLUSTER_PORT")
    [[ -n $(wait_sessions "$STARTED_ADMIN_PORT" "$n") ]] || log "WARNING: the joining replica never held all $n sessions"
    sleep 3 # every peer's sync reply has arrived and been freed
    total=$(bytes_received "$joiner" "${cports[@]}" "$STARTED_CLUSTER_PORT")
    rss=$(status_kib VmRSS "$joiner") held=$(replica_sessions "$STARTED_ADMIN_PORT")
    printf '{"kind":"sync","entries":%d,"held":%s,"ready_s":%s,"bytes_until_ready":%d,"bytes_all_peers":%d,"peers":%d,"rss_kib":%d,"empty_rss_kib":%d,"heap_bytes":%s,"empty_heap_bytes":%s,"seed_cpu_s":%s,"joiner_cpu_s":%s,"steal_s":%s}\n' \
      "$n" "${held:-null}" "${ready_s:-null}" "$received" "$total" "$REPLICAS" "$rss" "$empty_rss" \
      "$(heap_bytes "$STARTED_ADMIN_PORT")" "$empty_heap" "$(ticks_to_s "${seed_sync_ticks:-0}")" \
      "$(ticks_to_s "${joiner_sync_ticks:-0}")" "$steal_s" >>"$RAW"
    log "CPU until the joining replica was ready: the seed's $(ticks_to_s "${seed_sync_ticks:-0}") s, the joiner's $(ticks_to_s "${joiner_sync_ticks:-0}") s; the host's steal over the window $steal_s s"
    log "full sync $k/$SYNC_REPEATS of $n bindings: ready after ${ready_s:-never} s, $received bytes received until ready ($total from all $REPLICAS peers), RSS $rss KiB (an empty replica: $empty_rss KiB)"
    stop_pid "$joiner"
    ready_s="" seed_sync_ticks="" joiner_sync_ticks=""
  done
  # 4 (control). The same load while a busy loop runs on every core and scg
  # does nothing else: what waiting for a CPU alone costs a decision here.
  busy_loops() {
    local k busy=()
    for ((k = 0; k < $(nproc); k++)); do
      timeout "$DECISION_SECS" bash -c 'while :; do :; done' &
      busy+=("$!")
      CHILDREN+=("$!")
    done
    for k in "${busy[@]}"; do
      wait "$k" || true
      forget_child "$k"
    done
  }
  decisions busy_loops "${admins[0]}" "$grpc1" busy_loops
  for ((r = ${#pids[@]} - 1; r >= 0; r--)); do stop_pid "${pids[r]}"; done
}

json_seconds() { sed -n 's/.*"seconds": *\([0-9.]*\).*/\1/p' "$1"; }

# tool_version nginx|haproxy|h2load: its version, "none" when it is not installed.
tool_version() {
  command -v "$1" >/dev/null || {
    echo none
    return
  }
  case $1 in
    nginx) nginx -v 2>&1 | sed 's/.*\///' ;;
    haproxy) haproxy -v | sed -n '1s/HAProxy version \([^ ]*\).*/\1/p' ;;
    h2load) h2load --version | sed -n '1s/.*\///p' ;;
  esac
}

write_meta() {
  local build_type allocator cpu_model end_binary before_field=""
  end_binary=$(sha256sum "$BUILD/scg" | cut -c1-12)
  [[ $end_binary == "$SCG_BINARY" ]] ||
    log "WARNING: $BUILD/scg changed during the run ($SCG_BINARY -> $end_binary); later phases may have run the new one"
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || echo unknown)
  allocator=glibc
  [[ $(ldd "$BUILD/scg" 2>/dev/null) == *jemalloc* ]] && allocator=jemalloc
  cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
  [[ -n $SCG_BEFORE ]] && before_field=",\"scg_before_sha256\":\"$SCG_BEFORE_BINARY\""
  printf '{"kind":"meta","mode":"%s","date":"%s","quick":%d,"git":"%s","build_type":"%s","scg_allocator":"%s","scg_sha256":"%s","scg_sha256_at_end":"%s"%s,"cpu":"%s","cpus":%d,"kernel":"%s","loadavg_before":"%s","loadavg_after":"%s","paths":"%s","rounds":%d,"stream_repeats":%d,"unary_secs":%d,"warmup_secs":%d,"stream_bytes":%d,"message_bytes":%d,"sessions":%d,"repl_sessions":%d,"replicas":%d,"h2load_concurrency":%d,"nginx":"%s","nginx_workers":"auto (%d)","haproxy":"%s","haproxy_threads":2,"h2load":"%s","stalled":"%s","workloads":"%s"}\n' \
    "$MODE" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$((${BENCH_QUICK:-0} == 1))" "$REV" "$build_type" "$allocator" "$SCG_BINARY" "$end_binary" "$before_field" \
    "${cpu_model//\"/}" "$(nproc)" "$(uname -r)" "$LOAD_START" "$(cut -d' ' -f1-3 /proc/loadavg)" "${PATHS[*]}" \
    "$ROUNDS" "$STREAM_REPEATS" "$UNARY_SECS" "$WARMUP_SECS" "$STREAM_BYTES" "$MESSAGE_BYTES" "$SESSIONS" \
    "$REPL_SESSIONS" "$REPLICAS" "$H2LOAD_CONCURRENCY" "$(tool_version nginx)" "$(nproc)" \
    "$(tool_version haproxy)" "$(tool_version h2load)" "${STALLED[*]}" "${WORKLOADS[*]}" >>"$RAW"
}

# Steady unary (c=32) and back-to-back streams through one scg for SOAK_SECS,
# scg's RSS sampled every 10 s: does it grow?
soak() {
  local t0 unary_pid sampler_pid streams=0 failures=0 i stream_bytes=$((STREAM_BYTES < (256 << 20) ? STREAM_BYTES : 256 << 20))
  # Steady means a fixed set of sessions: the unary load keeps its 32, and the
  # streams run one after another in one session, each released when complete.
  local session
  session=$(cat /proc/sys/kernel/random/uuid)
  start_fake
  start_gateway scg
  log "soak for ${SOAK_SECS}s through scg (pid $SCG_PID): unary c=32 and $((stream_bytes >> 20)) MiB streams"
  t0=$(now_s)
  timeout --kill-after=5 $((SOAK_SECS + 60)) "$BUILD/scg-bench" unary --target "127.0.0.1:$SCG_PORT" \
    --concurrency 32 --duration-secs "$SOAK_SECS" --warmup-secs 0 >"$WORK/soak-unary.json" 2>>"$WORK/bench-client.log" &
  unary_pid=$!
  CHILDREN+=("$unary_pid")
  # Samples at 10, 20, ... s: under load from the first one on.
  (
    for ((i = 0; i <= SOAK_SECS / 10; i++)); do
      sleep 10
      [[ -r /proc/$SCG_PID/status ]] || exit 0
      printf '{"kind":"soak_sample","t_s":%s,"rss_kib":%d}\n' \
        "$(awk -v a="$t0" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }')" "$(status_kib VmRSS "$SCG_PID")" >>"$RAW"
    done
  ) &
  sampler_pid=$!
  CHILDREN+=("$sampler_pid")
  for ((i = 0; i < 100000; i++)); do
    kill -0 "$unary_pid" 2>/dev/null || break
    if run_bounded 660 "$WORK/soak-stream.json" "$BUILD/scg-bench" stream --target "127.0.0.1:$SCG_PORT" \
      --bytes "$stream_bytes" --message-bytes "$MESSAGE_BYTES" --session-id "$session"; then
      streams=$((streams + 1))
    else
      failures=$((failures + 1))
    fi
  done
  wait "$unary_pid" || die "the soak's unary load failed: $(cat "$WORK/soak-unary.json")"
  forget_child "$unary_pid"
  stop_pid "$sampler_pid"
  printf '{"kind":"soak","seconds":%d,"unary_rpcs":%s,"unary_errors":%s,"streams":%d,"stream_failures":%d,"stream_bytes":%d}\n' \
    "$SOAK_SECS" "$(json_int "$WORK/soak-unary.json" rpcs)" "$(json_int "$WORK/soak-unary.json" errors_total)" \
    "$streams" "$failures" "$stream_bytes" >>"$RAW"
  log "soak done: $(cat "$WORK/soak-unary.json"); $streams streams, $failures failed"
}

# replay (on_backend_lost: replay): replay time against journal size, and the
# memory a journaled session costs (scripts/bench_replay.py; its JSON in $1).
replay_bench() {
  local py=$BUILD/realspark/py43/bin/python
  [[ -x $py ]] || die "replay: $py is missing (scripts/setup.sh makes it)"
  log "replay: replay time against journal size, memory per journaled session"
  "$py" scripts/bench_replay.py --build "$BUILD" --sessions "${BENCH_REPLAY_SESSIONS:-2000}" --out "$1" |
    while read -r line; do log "replay: $line"; done
}

# ---------------------------------------------------------------------- run

mkdir -p bench-results
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

if [[ $MODE == soak ]]; then
  soak
  OUT=bench-results/soak-$STAMP
else
  log "load average before: $LOAD_START; paths: ${PATHS[*]}; rounds=$ROUNDS unary=${UNARY_SECS}s" \
    "(+${WARMUP_SECS}s warm-up) at c=${UNARY_CONCURRENCIES[*]}, h2load c=$H2LOAD_CONCURRENCY," \
    "stream=$STREAM_BYTES bytes in $MESSAGE_BYTES-byte messages, stalled readers=${STALLED[*]}, sessions=$SESSIONS," \
    "cluster: $REPLICAS replicas, ${REPL_RATE}/s for ${REPL_RATE_SECS}s, $REPL_SESSIONS at full speed, a $SYNC_ENTRIES-entry sync"
  start_servers
  measure_idle
  # Peak RSS under the rounds' load (not the stalled readers': they hold memory on purpose).
  if workload unary || workload h2load || workload stream; then
    start_rss_samplers
    load_rounds
    stop_rss_samplers
  fi
  workload stalled && stalled_bench
  ((SESSIONS > 0)) && idle_sessions
  ((REPL_SESSIONS > 0)) && cluster_bench
  OUT=bench-results/bench-$STAMP
  if workload replay; then replay_bench "$OUT.replay.json"; fi
fi
write_meta

cp "$RAW" "$OUT.raw.jsonl"
"$BUILD/scg-bench" report --raw "$RAW" --json "$OUT.json" --markdown "$OUT.md"
log "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
log "wrote $OUT.json, $OUT.md and $OUT.raw.jsonl"
