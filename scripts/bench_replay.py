#!/usr/bin/env python3
"""Replay's costs (on_backend_lost.action: replay, docs/replay.md), on loopback
against scg-fake-spark:

  replay time against journal size: a session journals N Config entries (and,
  at the last points, M MiB of artifacts); its server is SIGKILLed; the next
  call is replayed on the other server. Reported: scg's own replay time
  (scg_replay_duration_seconds) and the held call's latency, which includes
  the wait for the server to count as lost (after_secs: 1);

  memory per journaled session: S sessions, each with K journaled Config
  entries, through one scg with replay and one with rebind (no journal); the
  difference in RSS growth, per session, is what journaling costs.

  python3 scripts/bench_replay.py [--build build] [--sessions 2000] [--out FILE]

It needs the grpcio package (the realspark venv has it: scripts/bench.sh runs
it with build/realspark/py43/bin/python).
"""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import zlib

import grpc


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


USER = ld(2, ld(1, b"bench"))


def config_set(session: str, pairs) -> bytes:
    body = b"".join(ld(1, ld(1, k.encode()) + ld(2, v.encode())) for k, v in pairs)
    return ld(1, session.encode()) + USER + ld(3, ld(1, body))


def config_get(session: str, key: str, observed: str = "") -> bytes:
    req = ld(1, session.encode()) + USER + ld(3, ld(4, ld(1, key.encode())))
    return req + (ld(8, observed.encode()) if observed else b"")


def artifact_message(session: str, name: str, data: bytes) -> bytes:
    chunk = ld(1, data) + vi(2, zlib.crc32(data))
    return ld(1, session.encode()) + USER + ld(3, ld(1, ld(1, name.encode()) + ld(2, chunk)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 15) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


class Lab:
    """Two fakes (a, b) and scg in front of them; the fakes can be killed and started again."""

    def __init__(self, build: str, work: str, action: str):
        self.build, self.work = build, work
        self.ports = {"fake-a": free_port(), "fake-b": free_port()}
        self.fakes: dict = {}
        for name in self.ports:
            self.start_fake(name)
        self.grpc, self.admin = free_port(), free_port()
        cfg = os.path.join(work, f"scg-{action}.yaml")
        with open(cfg, "w") as f:
            f.write(f"bind_addr: 127.0.0.1:{self.grpc}\nadmin_addr: 127.0.0.1:{self.admin}\n"
                    "backends:\n" + "".join(f"  - {{ name: {n}, address: 127.0.0.1:{p} }}\n"
                                            for n, p in self.ports.items()) +
                    "placement: { strategy: round_robin }\n"
                    "health: { interval_ms: 100, timeout_ms: 300, failures: 1 }\n"
                    f"on_backend_lost: {{ after_secs: 1, action: {action}, spool_dir: {work}/spool,"
                    " max_journal_kib: 65536, max_artifacts_mib: 1024 }\n"
                    "admin: { allow_unauthenticated: true }\nlogging: { level: info }\nshutdown: { deadline_secs: 1 }\n")
        self.log = open(os.path.join(work, f"scg-{action}.log"), "w")
        self.scg = subprocess.Popen([os.path.join(build, "scg"), "--config", cfg], stdout=self.log,
                                    stderr=subprocess.STDOUT)
        wait_port(self.grpc)
        wait_port(self.admin)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc}",
                                             options=[("grpc.max_receive_message_length", 1 << 28)])
        self.config = self.channel.unary_unary("/spark.connect.SparkConnectService/Config")
        self.upload = self.channel.stream_unary("/spark.connect.SparkConnectService/AddArtifacts")

    def start_fake(self, name: str) -> None:
        log = open(os.path.join(self.work, f"{name}.log"), "a")
        self.fakes[name] = subprocess.Popen(
            [os.path.join(self.build, "scg-fake-spark"), "--name", name, "--listen", f"127.0.0.1:{self.ports[name]}"],
            stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.ports[name])

    def kill_fake(self, name: str) -> None:
        p = self.fakes.pop(name)
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def call(self, request: bytes):
        """A Config call: (server-side id, the backend that answered)."""
        body, call = self.config.with_call(request, timeout=60)
        meta = dict(call.initial_metadata())
        sid = ""
        rest = body
        while rest:  # ConfigResponse.server_side_session_id = 4 (field 1 is session_id)
            tag, rest = rest[0], rest[1:]
            n, shift = 0, 0
            while True:
                b, rest = rest[0], rest[1:]
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            if tag & 7 != 2:
                continue
            if tag >> 3 == 4:
                sid = rest[:n].decode()
            rest = rest[n:]
        return sid, meta.get("x-fake-backend", "")

    def metrics(self) -> dict:
        import urllib.request
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/metrics", timeout=10).read().decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, _, v = line.rpartition(" ")
                try:
                    out[k] = float(v)
                except ValueError:
                    pass
        return out

    def rss_kib(self) -> int:
        with open(f"/proc/{self.scg.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def healthy(self, name: str) -> bool:
        import urllib.request
        j = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/api/v1/backends", timeout=10).read())
        return next(b for b in j["backends"] if b["name"] == name)["healthy"]

    def close(self) -> None:
        self.channel.close()
        self.scg.send_signal(signal.SIGTERM)  # its log is flushed
        try:
            self.scg.wait(40)
        except subprocess.TimeoutExpired:
            self.scg.kill()
            self.scg.wait(10)
        for p in self.fakes.values():
            p.send_signal(signal.SIGKILL)
            p.wait(10)


def replay_point(lab: Lab, entries: int, artifact_mib: int) -> dict:
    session = str(uuid.uuid4())
    observed, holder = lab.call(config_get(session, "k"))
    for i in range(entries):  # one call, one journal entry (each key its own)
        lab.config.with_call(config_set(session, [(f"spark.bench.k{i}", "v" * 40)]), timeout=60)
    if artifact_mib:
        data = os.urandom(1 << 20)
        msgs = [artifact_message(session, f"cache/bench-{i}", data) for i in range(artifact_mib)]
        lab.upload(iter(msgs), timeout=120)
    before = lab.metrics()
    lab.kill_fake(holder)
    t0 = time.monotonic()
    sid, now_on = lab.call(config_get(session, f"spark.bench.k{max(entries - 1, 0)}", observed))
    held = time.monotonic() - t0
    after = lab.metrics()
    assert sid == observed and now_on != holder, f"replayed: id {sid} on {now_on}"
    took = after["scg_replay_duration_seconds_sum"] - before.get("scg_replay_duration_seconds_sum", 0)
    lab.start_fake(holder)
    end = time.monotonic() + 15
    while not lab.healthy(holder) and time.monotonic() < end:
        time.sleep(0.1)
    return {"entries": entries, "artifact_mib": artifact_mib, "replay_ms": round(took * 1000, 1),
            "held_call_ms": round(held * 1000, 1)}


def memory(build: str, work: str, action: str, sessions: int, per_session: int) -> dict:
    lab = Lab(build, work, action)
    try:
        for i in range(50):  # warm the channels and allocators
            lab.call(config_get(str(uuid.uuid4()), "k"))
        time.sleep(1)
        base = lab.rss_kib()
        for _ in range(sessions):
            s = str(uuid.uuid4())
            for k in range(per_session):
                lab.config.with_call(config_set(s, [(f"spark.sql.bench.key{k}", "value-" + str(k))]), timeout=60)
        time.sleep(1)
        m = lab.metrics()
        return {"action": action, "rss_growth_kib": lab.rss_kib() - base,
                "journal_bytes": int(m.get("scg_journal_bytes", 0)), "journal_sessions": int(m.get("scg_journal_sessions", 0))}
    finally:
        lab.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--sessions", type=int, default=2000)
    ap.add_argument("--per-session", type=int, default=10)
    ap.add_argument("--points", default="0:0,10:0,100:0,1000:0,5000:0,10:16,10:64",
                    help="entries:artifact_MiB pairs")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="scg-bench-replay-")
    results: dict = {"points": [], "memory": []}
    lab = Lab(args.build, work, "replay")
    try:
        for p in args.points.split(","):
            entries, mib = (int(x) for x in p.split(":"))
            r = replay_point(lab, entries, mib)
            print(json.dumps(r), flush=True)
            results["points"].append(r)
    finally:
        lab.close()
    for action in ("rebind", "replay"):
        r = memory(args.build, work, action, args.sessions, args.per_session)
        print(json.dumps(r), flush=True)
        results["memory"].append(r)
    grow = {m["action"]: m["rss_growth_kib"] for m in results["memory"]}
    results["journal_cost_bytes_per_session"] = round((grow["replay"] - grow["rebind"]) * 1024 / args.sessions)
    print(json.dumps({"journal_cost_bytes_per_session": results["journal_cost_bytes_per_session"],
                      "sessions": args.sessions, "entries_per_session": args.per_session}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    if not os.environ.get("BENCH_KEEP"):
        subprocess.run(["rm", "-rf", work], check=False)


if __name__ == "__main__":
    main()
