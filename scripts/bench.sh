#!/usr/bin/env bash
# scg's benchmark, one command: scg-fake-spark direct vs through scg, on loopback.
#
#   scripts/bench.sh                 full run (3 rounds, 1 GiB stream, 100k sessions)
#   BENCH_QUICK=1 scripts/bench.sh   smoke test (under a minute)
#
# Settings (environment): BENCH_ROUNDS, BENCH_UNARY_SECS, BENCH_WARMUP_SECS,
# BENCH_STREAM_BYTES, BENCH_MESSAGE_BYTES, BENCH_STREAM_REPEATS (stream pairs per
# round), BENCH_SESSIONS, BENCH_BUILD_DIR.
# Results go to bench-results/ (JSON, Markdown, raw records). What the figures
# mean: docs/performance.md.
set -euo pipefail

cd "$(dirname "$0")/.."
BUILD=${BENCH_BUILD_DIR:-build}

if [[ ${BENCH_QUICK:-0} == 1 ]]; then
  defaults=(1 2 1 $((64 << 20)) 10000 1)
else
  defaults=(3 10 2 $((1 << 30)) 100000 3)
fi
ROUNDS=${BENCH_ROUNDS:-${defaults[0]}}
UNARY_SECS=${BENCH_UNARY_SECS:-${defaults[1]}}
WARMUP_SECS=${BENCH_WARMUP_SECS:-${defaults[2]}}
STREAM_BYTES=${BENCH_STREAM_BYTES:-${defaults[3]}}
MESSAGE_BYTES=${BENCH_MESSAGE_BYTES:-$((4 << 20))}
SESSIONS=${BENCH_SESSIONS:-${defaults[4]}}
STREAM_REPEATS=${BENCH_STREAM_REPEATS:-${defaults[5]}}
SESSION_CONCURRENCY=32
SESSION_WARMUP=1000

log() { printf '%s bench: %s\n' "$(date +%T)" "$*" >&2; }
die() {
  log "error: $*"
  exit 1
}

for setting in ROUNDS UNARY_SECS WARMUP_SECS STREAM_BYTES MESSAGE_BYTES SESSIONS STREAM_REPEATS; do
  [[ ${!setting} =~ ^[0-9]+$ ]] || die "BENCH_$setting must be a non-negative integer, got '${!setting}'"
done
((ROUNDS >= 1 && UNARY_SECS >= 1 && STREAM_REPEATS >= 1 && MESSAGE_BYTES >= 1 && STREAM_BYTES >= MESSAGE_BYTES)) ||
  die "need BENCH_ROUNDS, BENCH_UNARY_SECS, BENCH_STREAM_REPEATS >= 1 and BENCH_STREAM_BYTES >= BENCH_MESSAGE_BYTES >= 1"

log "building scg, scg-fake-spark and scg-bench in $BUILD"
cmake --build "$BUILD" -j2 --target scg scg-fake-spark scg-bench >&2

# Others may rebuild scg while this runs: name the source and binary measured.
REV=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]] && REV="$REV+dirty"
SCG_BINARY=$(sha256sum "$BUILD/scg" | cut -c1-12)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/scg-bench.XXXXXX")
RAW=$WORK/raw.jsonl
CLK_TCK=$(getconf CLK_TCK)

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
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${CHILDREN[@]}"; do stop_pid "$pid"; done
  if ((rc == 0)); then
    rm -rf "$WORK"
  else
    log "failed (exit $rc); logs kept in $WORK"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

json_int() { sed -n "s/.*\"$2\": *\([0-9][0-9]*\).*/\1/p" "$1"; }

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

# start_scg TAG: an scg in front of the fake; returns once it routes a call.
start_scg() {
  local tag=$1 i out
  cat >"$WORK/$tag.yaml" <<EOF
bind_addr: "127.0.0.1:0"
admin_addr: "127.0.0.1:0"
backends:
  - { name: bench, address: "127.0.0.1:$FAKE_PORT", ui_url: "http://127.0.0.1:$FAKE_UI_PORT" }
logging: { level: warn }
EOF
  "$BUILD/scg" --config "$WORK/$tag.yaml" --port-file "$WORK/$tag.ports" >"$WORK/$tag.log" 2>&1 &
  SCG_PID=$!
  CHILDREN+=("$SCG_PID")
  wait_port_file "$WORK/$tag.ports" "$SCG_PID" "$WORK/$tag.log"
  SCG_PORT=$(json_int "$WORK/$tag.ports" grpc)
  [[ -n $SCG_PORT ]] || die "unreadable $WORK/$tag.ports"
  for ((i = 0; i < 50; i++)); do
    if run_bounded 20 "$WORK/probe.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$SCG_PORT" \
      --count 1 --concurrency 1 && grep -q '"errors":0' "$WORK/probe.json"; then
      return 0
    fi
    sleep 0.2
  done
  die "scg does not route to the fake after 50 tries; see $WORK/$tag.log"
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

# Busy ticks of the whole machine, all CPUs.
box_busy_ticks() {
  local user nice system irq softirq steal
  read -r _ user nice system _ _ irq softirq steal _ </proc/stat
  echo $((user + nice + system + irq + softirq + steal))
}

ticks_to_s() { awk -v t="$1" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", t / hz }'; }

status_kib() { awk -v key="$2:" '$1 == key { print $2 }' "/proc/$1/status"; }

# Config calls the fake has answered (its own count, to check the client's); empty
# if curl is missing or the fake does not answer.
fake_config_calls() {
  { curl -s --max-time 5 "http://127.0.0.1:$FAKE_UI_PORT/fake/stats" || true; } |
    sed -n 's/.*"Config":\([0-9]*\).*/\1/p'
}

now_s() { date +%s.%N; }

# sample_rss PID OUT: writes PID's highest VmRSS (KiB) to OUT every 0.2 s until PID
# is gone or this is stopped; at most 2 h.
sample_rss() {
  local pid=$1 out=$2 max=0 key value rest i
  for ((i = 0; i < 36000; i++)); do
    [[ -r /proc/$pid/status ]] || return 0
    while read -r key value rest; do
      if [[ $key == VmRSS: ]]; then
        if ((value > max)); then
          max=$value
          echo "$max" >"$out"
        fi
        break
      fi
    done <"/proc/$pid/status"
    sleep 0.2
  done
}

# run_case KIND CASE LABEL PATH ROUND ARGS...: one scg-bench run against the fake
# (PATH direct) or scg (PATH scg), appended to the raw records with the CPU that
# scg, the fake and the whole machine spent meanwhile.
run_case() {
  local kind=$1 name=$2 label=$3 path=$4 round=$5 limit target
  shift 5
  target=127.0.0.1:$FAKE_PORT
  [[ $path == scg ]] && target=127.0.0.1:$SCG_PORT
  limit=$((WARMUP_SECS + UNARY_SECS + 60))
  [[ $kind == stream ]] && limit=660
  local scg0 fake0 busy0 t0 calls0 scg1 fake1 busy1 t1 calls1 out
  calls0=$(fake_config_calls)
  scg0=$(proc_ticks "$SCG_PID") fake0=$(proc_ticks "$FAKE_PID") busy0=$(box_busy_ticks) t0=$(now_s)
  if ! run_bounded "$limit" "$WORK/run.json" "$BUILD/scg-bench" "$kind" --target "$target" "$@"; then
    die "scg-bench $kind via $path failed: $(cat "$WORK/run.json") (see $WORK/bench-client.log)"
  fi
  scg1=$(proc_ticks "$SCG_PID") fake1=$(proc_ticks "$FAKE_PID") busy1=$(box_busy_ticks) t1=$(now_s)
  calls1=$(fake_config_calls)
  out=$(<"$WORK/run.json")
  [[ $out == \{*\} ]] || die "scg-bench printed no JSON object: $out"
  local extra backend_calls=-1
  [[ -n $calls0 && -n $calls1 ]] && backend_calls=$((calls1 - calls0))
  extra=$(printf '"kind":"%s","case":"%s","label":"%s","path":"%s","round":%d,"scg_cpu_s":%s,"fake_cpu_s":%s,"box_busy_s":%s,"run_wall_s":%s,"backend_config_calls":%s' \
    "$kind" "$name" "$label" "$path" "$round" "$(ticks_to_s $((scg1 - scg0)))" \
    "$(ticks_to_s $((fake1 - fake0)))" "$(ticks_to_s $((busy1 - busy0)))" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$backend_calls")
  echo "${out%\}},$extra}" >>"$RAW"
  log "#$round $label $path: $out"
  if [[ $kind == unary ]] && ! [[ $out == *'"errors_total":0'* ]]; then
    log "WARNING: $label via $path had failed calls (see $WORK/bench-client.log)"
  fi
}

# ---------------------------------------------------------------------- run

mkdir -p bench-results
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
log "load average before: $LOAD_START; rounds=$ROUNDS unary=${UNARY_SECS}s (+${WARMUP_SECS}s warm-up)" \
  "stream=$STREAM_BYTES bytes in $MESSAGE_BYTES-byte messages, sessions=$SESSIONS"

start_fake
start_scg scg
log "fake on 127.0.0.1:$FAKE_PORT (pid $FAKE_PID), scg on 127.0.0.1:$SCG_PORT (pid $SCG_PID)"

# What scg costs doing nothing (its timers and thread pools), before any load.
IDLE_SECS=5
idle0=$(proc_ticks "$SCG_PID")
sleep "$IDLE_SECS"
idle1=$(proc_ticks "$SCG_PID")
SCG_IDLE_CORES=$(awk -v t=$((idle1 - idle0)) -v hz="$CLK_TCK" -v s="$IDLE_SECS" 'BEGIN { printf "%.3f", t / hz / s }')
echo "{\"kind\":\"idle\",\"scg_idle_cores\":$SCG_IDLE_CORES,\"seconds\":$IDLE_SECS}" >>"$RAW"
log "scg idle for ${IDLE_SECS}s: $SCG_IDLE_CORES cores"

sample_rss "$SCG_PID" "$WORK/rss.max" &
SAMPLER_PID=$!
CHILDREN+=("$SAMPLER_PID")

# The first large stream a process serves is slower (its allocator adapts to the
# big messages): warm both paths up once, unmeasured.
WARM_STREAM_BYTES=$((STREAM_BYTES < (256 << 20) ? STREAM_BYTES : 256 << 20))
for target in "127.0.0.1:$FAKE_PORT" "127.0.0.1:$SCG_PORT"; do
  run_bounded 660 "$WORK/warm.json" "$BUILD/scg-bench" stream --target "$target" \
    --bytes "$WARM_STREAM_BYTES" --message-bytes "$MESSAGE_BYTES" || die "warm-up stream to $target failed"
done

STREAM_LABEL="stream $((STREAM_BYTES >> 20)) MiB / $((MESSAGE_BYTES >> 20)) MiB msgs"
for ((round = 1; round <= ROUNDS; round++)); do
  # Alternate which path goes first, so drift over a round does not favour one.
  paths=(direct scg)
  ((round % 2 == 0)) && paths=(scg direct)
  for concurrency in 1 32; do
    for path in "${paths[@]}"; do
      run_case unary "unary_c$concurrency" "unary c=$concurrency" "$path" "$round" \
        --concurrency "$concurrency" --duration-secs "$UNARY_SECS" --warmup-secs "$WARMUP_SECS"
    done
  done
  # A stream takes well under a second: take several pairs per round, each pair
  # its own sample, so that a burst of foreign load spoils one sample, not a round.
  for ((repeat = 1; repeat <= STREAM_REPEATS; repeat++)); do
    for path in "${paths[@]}"; do
      run_case stream stream "$STREAM_LABEL" "$path" $(((round - 1) * STREAM_REPEATS + repeat)) \
        --bytes "$STREAM_BYTES" --message-bytes "$MESSAGE_BYTES"
    done
  done
done

stop_pid "$SAMPLER_PID"
MAX_RSS=$(cat "$WORK/rss.max" 2>/dev/null || echo 0)
HWM=$(status_kib "$SCG_PID" VmHWM)
echo "{\"kind\":\"memory\",\"scg_max_rss_kib\":$MAX_RSS,\"scg_hwm_kib\":${HWM:-0}}" >>"$RAW"
log "scg RSS under load: sampled max ${MAX_RSS} KiB, VmHWM ${HWM} KiB"

# Idle sessions on a fresh scg: after the load phase the allocator holds freed
# stream buffers that new sessions would reuse, hiding their cost.
stop_pid "$SCG_PID"
start_scg scg-sessions
run_bounded 120 "$WORK/warm.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$SCG_PORT" \
  --count "$SESSION_WARMUP" --concurrency "$SESSION_CONCURRENCY" || die "session warm-up failed"
sleep 1
RSS_BEFORE=$(status_kib "$SCG_PID" VmRSS)
if ((SESSIONS > 0)); then
  run_bounded 600 "$WORK/sessions.json" "$BUILD/scg-bench" sessions --target "127.0.0.1:$SCG_PORT" \
    --count "$SESSIONS" --concurrency "$SESSION_CONCURRENCY" || die "opening $SESSIONS sessions failed"
  sleep 2
  RSS_AFTER=$(status_kib "$SCG_PID" VmRSS)
  out=$(<"$WORK/sessions.json")
  echo "${out%\}},\"kind\":\"sessions\",\"rss_before_kib\":$RSS_BEFORE,\"rss_after_kib\":$RSS_AFTER}" >>"$RAW"
  log "sessions: $out; scg RSS $RSS_BEFORE -> $RSS_AFTER KiB"
fi

LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
SCG_BINARY_END=$(sha256sum "$BUILD/scg" | cut -c1-12)
[[ $SCG_BINARY_END == "$SCG_BINARY" ]] ||
  log "WARNING: $BUILD/scg changed during the run ($SCG_BINARY -> $SCG_BINARY_END); the session phase may have run the new one"
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")
ALLOCATOR=glibc
ldd "$BUILD/scg" 2>/dev/null | grep -q jemalloc && ALLOCATOR=jemalloc
CPU_MODEL=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
printf '{"kind":"meta","date":"%s","quick":%d,"git":"%s","build_type":"%s","scg_allocator":"%s","scg_sha256":"%s","scg_sha256_at_end":"%s","cpu":"%s","cpus":%d,"kernel":"%s","loadavg_before":"%s","loadavg_after":"%s","rounds":%d,"stream_repeats":%d,"unary_secs":%d,"warmup_secs":%d,"stream_bytes":%d,"message_bytes":%d,"sessions":%d}\n' \
  "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(( ${BENCH_QUICK:-0} == 1 ))" "$REV" "$BUILD_TYPE" "$ALLOCATOR" "$SCG_BINARY" "$SCG_BINARY_END" "${CPU_MODEL//\"/}" "$(nproc)" "$(uname -r)" \
  "$LOAD_START" "$LOAD_END" "$ROUNDS" "$STREAM_REPEATS" "$UNARY_SECS" "$WARMUP_SECS" "$STREAM_BYTES" "$MESSAGE_BYTES" "$SESSIONS" >>"$RAW"

OUT=bench-results/bench-$STAMP
cp "$RAW" "$OUT.raw.jsonl"
"$BUILD/scg-bench" report --raw "$RAW" --json "$OUT.json" --markdown "$OUT.md"
log "load average after: $LOAD_END"
log "wrote $OUT.json, $OUT.md and $OUT.raw.jsonl"
