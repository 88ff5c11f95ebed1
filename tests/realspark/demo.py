"""scripts/demo.sh --spark: the demo's walkthrough on real Spark.

Starts two Spark 4.3 Connect servers (local mode, each requiring a token it got
through its environment), one scg replica in front of them, and a PySpark
client that opens four sessions, each keeping a temp view and a conf across
calls and running a query that outlives the servers' 3-second stream duration
(so it is reattached through scg). Prints which server held each session
before and after its queries and scg's view of the backends; with a terminal
on stdin it keeps running until Ctrl-C, without one (a script, CI, the
realspark.demo_spark test) it stops everything it started and exits.
"""

import json
import os
import secrets
import sys
import time
import warnings

warnings.filterwarnings("ignore")

from pyspark.sql import SparkSession  # noqa: E402

import sparklab as lab  # noqa: E402


def main() -> None:
    port = int(os.environ.get("SCG_DEMO_PORT", "15003"))
    admin = int(os.environ.get("SCG_DEMO_ADMIN_PORT", "9090"))
    work = lab.workdir("demo")
    token = secrets.token_urlsafe(24)
    print("Starting two Spark 4.3 Connect servers (about 20 s)...")
    servers = [lab.start_spark(name, "4.3", work, token) for name in ("spark-a", "spark-b")]
    for s in servers:
        lab.wait_spark_ready(s, timeout=180)
    cfg = lab.base_config(servers, token, bind_addr=f"127.0.0.1:{port}", admin_addr=f"127.0.0.1:{admin}",
                          placement={"strategy": "round_robin"})
    scg = lab.Scg(cfg, work)
    print(f"\nscg is listening on 127.0.0.1:{scg.grpc} in front of spark-a (:{servers[0]['grpc']}) "
          f"and spark-b (:{servers[1]['grpc']}); only scg has their token.")
    print("Four PySpark sessions: a temp view and a conf each, then a 5 s query that the server cuts")
    print("every 3 s (the client reattaches through scg).\n")
    sessions = [SparkSession.builder.remote(scg.url()).create() for _ in range(4)]
    for i, s in enumerate(sessions):
        s.sql(f"create or replace temp view mine as select {i} as n")
        s.conf.set("spark.sql.shuffle.partitions", str(10 + i))

    def where():
        return {r["session_id"]: r["backend"] for r in scg.get("/api/v1/sessions?limit=100")["sessions"]}
    first = where()
    results = []
    for s in sessions:
        n = s.sql("select n from mine").collect()[0].n
        slept = s.sql("select reflect('java.lang.Thread', 'sleep', cast(5000 as bigint)) as z, 'done' as d").collect()
        results.append((n, s.conf.get("spark.sql.shuffle.partitions"), slept[0].d))
    last = where()
    for i, (s, (n, conf, d)) in enumerate(zip(sessions, results)):
        a, b = first.get(s.client._session_id, "?"), last.get(s.client._session_id, "?")
        held = f"stayed on {a}" if a == b else f"moved from {a} to {b}"
        print(f"  session {i}: {held}, its view says {n}, conf {conf}, long query {d}")
    reattached = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"})
    print(f"\nReattachExecute calls scg forwarded: {reattached:.0f}")
    print(f"\nBackends as scg sees them (GET http://127.0.0.1:{scg.admin}/api/v1/backends):")
    print(json.dumps(scg.get("/api/v1/backends"), indent=1))
    for s in sessions:
        s.stop()
    print(f"Logs in {work}.")
    if sys.stdin.isatty():
        print(f"\nConnect your own client: SparkSession.builder.remote(\"sc://127.0.0.1:{scg.grpc}\").getOrCreate()")
        print("Press Ctrl-C to stop.")
        try:
            while True:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    else:
        print("No terminal on stdin: stopping scg and the Spark servers.")
    lab._reap_children()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # PySpark's release threads must not hold the process
