"""The shared Spark Connect servers of the real-Spark tier (a ctest fixture).

  servers.py start   starts two Spark 4.3 servers and one Spark 4.0 server,
                     every one requiring the same token, and writes
                     build/realspark/servers.json once each listens on the
                     gRPC and UI ports it was given (sparklab.wait_spark_ready)
  servers.py stop    kills them by pid (and any left by an earlier run)

Scenarios that kill or freeze a server start their own instead.
"""

import json
import os
import secrets
import sys
import time
from pathlib import Path

import sparklab as lab

SET = [("spark43a", "4.3"), ("spark43b", "4.3"), ("spark40", "4.0")]


def stop() -> None:
    if lab.SERVERS_JSON.exists():
        for s in json.loads(lab.SERVERS_JSON.read_text()).get("servers", []):
            lab.kill_tree(s["pid"])
        lab.SERVERS_JSON.unlink()
    print("realspark servers stopped")


def start() -> None:
    stop()
    for version, venv in lab.VENVS.items():
        if not lab.spark_home(version).exists():
            sys.exit(f"Spark {version} is not installed under {venv}: run scripts/setup.sh")
    work = lab.LAB / "servers"
    work.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(24)
    t0 = time.monotonic()
    servers = [lab.start_spark(name, version, work, token) for name, version in SET]
    try:
        for s in servers:
            lab.wait_spark_ready(s, timeout=180)  # restarts one that lost a port to another process
    except AssertionError:
        for s in servers:
            lab.kill_tree(s["pid"])
        raise
    # From here the fixture owns the servers: the atexit reaper must not take them.
    lab._children.clear()
    lab._groups.clear()
    servers = [lab.description(s) for s in servers]
    lab.SERVERS_JSON.write_text(json.dumps({"token": token, "servers": servers}, indent=1))
    print(f"realspark servers up in {time.monotonic() - t0:.1f} s: " +
          ", ".join(f"{s['name']} (Spark {s['version']}) :{s['grpc']} ui :{s['ui']}" for s in servers))


if __name__ == "__main__":
    {"start": start, "stop": stop}[sys.argv[1]]()
