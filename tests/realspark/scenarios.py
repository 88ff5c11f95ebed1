"""Scenarios of the real-Spark tier: real Spark Connect servers, real PySpark (and
spark-connect-go) clients, scg in front. One ctest test per scenario:

  python scenarios.py NAME        runs one scenario (exit 0: every assertion held)
  python scenarios.py NAME --server SERVER
                                  runs a scenario that takes any shared server
                                  against SERVER (e.g. spark40) instead of spark43a
  python scenarios.py --list      names them

Each scenario asserts on results (rows, values, errors, scg's metrics and
listings), never only on exit codes. The shared servers come from
servers.json (servers.py start); scenarios that kill or freeze a server start
their own. Run with the Python of the PySpark version under test (the client
version is pyspark.__version__).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")
os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")

import grpc  # noqa: E402
import pyspark  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

import sparklab as lab  # noqa: E402

CLIENT = pyspark.__version__
SCENARIOS: dict = {}
# The shared server that the scenarios registered with any_server run against
# (--server; spark43a unless named). The others name their servers themselves.
SERVER = "spark43a"
ON_ANY_SERVER: set = set()


def scenario(fn=None, *, any_server: bool = False):
    """Registers a scenario; any_server: it runs against SERVER."""
    def register(f):
        SCENARIOS[f.__name__] = f
        if any_server:
            ON_ANY_SERVER.add(f.__name__)
        return f
    return register(fn) if fn else register


def check(cond, what: str):
    if not cond:
        raise AssertionError(what)
    print(f"  ok: {what}")


def connect(url: str) -> SparkSession:
    """A new Spark Connect session (not the process-wide default)."""
    return SparkSession.builder.remote(url).create()


def sleep_sql(ms: int) -> str:
    """A query that runs `ms` on the server (one task sleeping in the JVM)."""
    return f"select reflect('java.lang.Thread', 'sleep', cast({ms} as bigint)) as slept, 42 as answer"


def servers(*names):
    lab_state = lab.shared_servers()
    by_name = {s["name"]: s for s in lab_state["servers"]}
    return lab_state["token"], [by_name[n] for n in names]


def sessions_listing(scg) -> list[dict]:
    return scg.get("/api/v1/sessions?limit=1000")["sessions"]


def error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def grpc_code(e: BaseException) -> str:
    """The gRPC status of a PySpark error (PySpark 4.1+ keeps it), e.g. "RESOURCE_EXHAUSTED"."""
    code = e.getGrpcStatusCode() if hasattr(e, "getGrpcStatusCode") else None
    return code.name if code is not None else "(not kept by PySpark " + CLIENT + ")"


def check_runs_on(s: SparkSession, backend: dict) -> None:
    """The session's server is of the version of `backend` (spark.version is the server's answer)."""
    v = s.version
    check(v.startswith(backend["version"] + "."), f"the session runs on Spark {v} ({backend['name']})")


def running_jobs(server: dict) -> list[int]:
    """The ids of the jobs a server's UI shows running."""
    app = lab.ui_json(server, "/api/v1/applications")[0]["id"]
    return [j["jobId"] for j in lab.ui_json(server, f"/api/v1/applications/{app}/jobs?status=running")]


def operations_of(scg, s: SparkSession) -> list[str]:
    """The operation ids scg lists for session s."""
    return [o["operation_id"] for o in scg.get("/api/v1/operations?limit=1000")["operations"]
            if o["session_id"] == s.client._session_id]


def new_operation(scg, s: SparkSession, known: list[str], timeout: float = 15) -> str:
    """Waits until scg lists an operation of session s not in `known` (its
    ExecutePlan has reached scg) and returns its id."""
    return lab.wait_for("a new operation of the session in scg's listing",
                        lambda: next((o for o in operations_of(scg, s) if o not in known), None), timeout, 0.05)


# --- affinity and results ---------------------------------------------------------------


@scenario(any_server=True)
def affinity():
    """Temp views and SQL conf stay with their session across many calls, with
    sessions spread over two servers (SERVER and spark43b)."""
    token, backends = servers(SERVER, "spark43b")
    scg = lab.Scg(lab.base_config(backends, token, placement={"strategy": "round_robin"}), lab.workdir("aff"))
    spark = [connect(scg.url()) for _ in range(4)]
    for i, s in enumerate(spark):
        s.sql(f"create or replace temp view v as select {i} as n")
        s.conf.set("spark.sql.shuffle.partitions", str(10 + i))
    for _ in range(6):
        for i, s in enumerate(spark):
            assert s.sql("select n from v").collect()[0].n == i, "a session saw another session's view"
            assert s.conf.get("spark.sql.shuffle.partitions") == str(10 + i)
            assert s.range(100).count() == 100
    check(True, "4 sessions x 6 rounds: each saw its own view and conf")
    rows = sessions_listing(scg)
    ids = {s.client._session_id for s in spark}
    mine = [r for r in rows if r["session_id"] in ids]
    check(len(mine) == 4, f"scg lists the 4 sessions ({len(mine)})")
    check(len({r["backend"] for r in mine}) == 2, "the sessions are spread over both servers")
    on = {r["session_id"]: r["backend"] for r in mine}
    by_name = {b["name"]: b for b in backends}
    for s in spark:
        check_runs_on(s, by_name[on[s.client._session_id]])
    for s in spark:
        s.stop()


@scenario(any_server=True)
def big_result():
    """toPandas() of about 60 MB: the server cuts the stream every 8 MB
    (senderMaxStreamSize), the client reattaches and releases through scg."""
    token, backends = servers(SERVER)
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("big"))
    s = connect(scg.url())
    check_runs_on(s, backends[0])
    n = 1_500_000
    t0 = time.monotonic()
    pdf = s.range(0, n, 1, 4).selectExpr("id", "repeat('x', 32) as pad").toPandas()
    secs = time.monotonic() - t0
    size = pdf.memory_usage(deep=True).sum()
    check(len(pdf) == n and int(pdf["id"].sum()) == n * (n - 1) // 2, f"{n} rows, each exactly once ({secs:.1f} s)")
    check(size >= 50e6, f"the result is {size / 1e6:.0f} MB in pandas")
    reattach = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"})
    release = scg.metric("scg_forward_rpcs_total", {"rpc": "ReleaseExecute", "code": "OK"})
    check(reattach >= 1, f"the stream was continued by {reattach:.0f} ReattachExecute through scg")
    check(release >= 1, f"{release:.0f} ReleaseExecute went through scg")
    failed = {}
    for line in scg.get("/metrics").splitlines():
        if m := re.match(r'scg_forward_rpcs_total\{rpc="(\w+)",code="(\w+)"\} (\S+)$', line):
            if m.group(2) != "OK":
                failed[f"{m.group(1)} {m.group(2)}"] = float(m.group(3))
    # PySpark 4.1+ asks for spark.connect.session.planCompression.threshold at its
    # first plan, which Spark 4.0 does not know (SQL_CONF_NOT_FOUND, INTERNAL); it
    # then sends plans uncompressed.
    newer_client = tuple(int(x) for x in CLIENT.split(".")[:2]) >= (4, 1)
    expected = {"Config INTERNAL": 1.0} if backends[0]["version"] == "4.0" and newer_client else {}
    check(failed == expected, f"no call through scg failed but those expected ({failed or 'none'})")
    s.stop()


@scenario(any_server=True)
def long_query():
    """A query that runs past the server's stream duration (3 s here, 2 min by
    default) is continued by reattaches and returns its row once."""
    token, backends = servers(SERVER)
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("long"))
    s = connect(scg.url())
    check_runs_on(s, backends[0])
    t0 = time.monotonic()
    rows = s.sql(sleep_sql(8000)).collect()
    secs = time.monotonic() - t0
    check(len(rows) == 1 and rows[0].answer == 42, f"the 8 s query returned its row ({secs:.1f} s)")
    reattach = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"})
    check(reattach >= 2, f"it was reattached {reattach:.0f} times through scg")
    s.stop()


# --- execution limits follow the operation ---------------------------------------------------


def tenant_config(backends, token, limits: dict, **extra) -> dict:
    cfg = lab.base_config(backends, token,
                          tenants={"from": "header", "header": "x-scg-tenant", "on_missing": "reject"},
                          limits={"tenants": limits}, **extra)
    return cfg


@scenario
def execution_limit():
    """max_execution_secs counts from the operation's start, across its
    reattaches: a 12 s query of a tenant allowed 5 s is interrupted on the
    server and ends within the limit + 1 s; a 6 s query of a tenant allowed
    20 s completes."""
    token, backends = servers("spark43a")
    limit = 5
    limits = {"short": {"max_execution_secs": limit}, "long": {"max_execution_secs": 20}}
    scg = lab.Scg(tenant_config(backends, token, limits), lab.workdir("limit"))
    ok = connect(scg.url("x-scg-tenant=long"))
    check(ok.sql(sleep_sql(6000)).collect()[0].answer == 42, "a 6 s query within a 20 s limit completes")
    s = connect(scg.url("x-scg-tenant=short"))
    df = s.sql(sleep_sql(12000))
    t0 = time.monotonic()
    try:
        df.collect()
        raise AssertionError(f"a 12 s query of a tenant limited to {limit} s completed "
                             f"({time.monotonic() - t0:.1f} s): the limit did not follow the operation")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        secs = time.monotonic() - t0
        msg = error_text(e)
        check(grpc_code(e) == "RESOURCE_EXHAUSTED" and "max_execution_secs" in msg,
              f"the client is told why ({grpc_code(e)}): {msg[:160]}")
        check(limit <= secs < limit + 1, f"it ended after {secs:.2f} s (limit {limit} s)")
    lab.wait_for("the server to stop the query's job", lambda: not running_jobs(backends[0]), 3, 0.1)
    check(True, f"the server stopped its job {time.monotonic() - t0:.2f} s after the query began (of 12 s)")
    check(scg.metric("scg_executions_killed_total") == 1, "scg_executions_killed_total is 1")
    reattached = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute"})
    check(reattached >= 1, f"the cut query had been reattached ({reattached:.0f} ReattachExecute): "
                           "its clock ran across streams")
    ok.stop()
    s.stop()


@scenario
def execution_slot():
    """A tenant with max_executions 1: its running query keeps its slot across
    every reattach; another session of the tenant is refused
    RESOURCE_EXHAUSTED naming the limit while it runs, and gets in once it
    has ended."""
    token, backends = servers("spark43a")
    scg = lab.Scg(tenant_config(backends, token, {"one": {"max_executions": 1}}), lab.workdir("slot"))
    a = connect(scg.url("x-scg-tenant=one"))
    b = connect(scg.url("x-scg-tenant=one"))
    b.client.set_retry_policies([])  # each refusal reaches us (PySpark 4.1+ would wait out its RetryInfo)
    df = a.sql(sleep_sql(9000))
    known = operations_of(scg, a)
    done = {}

    def run_a():
        try:
            done["a"] = df.collect()[0].answer
        except Exception as e:  # noqa: BLE001
            done["a_err"] = error_text(e)
        done["a_end"] = time.monotonic()
    t = threading.Thread(target=run_a)
    t.start()
    new_operation(scg, a, known)  # a's query holds the slot from here
    got_in, refusals, other = [], [], []
    while t.is_alive() and len(got_in) + len(refusals) + len(other) < 200:
        try:
            b.sql("select 1 as x").collect()
            got_in.append(time.monotonic())
        except Exception as e:  # noqa: BLE001
            (refusals if grpc_code(e) == "RESOURCE_EXHAUSTED" else other).append(error_text(e))
        time.sleep(0.3)  # the pace of b's tries
    t.join(30)
    check(done.get("a") == 42, f"the 9 s query completed through its reattaches ({done.get('a_err', 'ok')})")
    check(scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"}) >= 2,
          "it was reattached (its slot held across streams)")
    early = [g for g in got_in if g < done["a_end"] - 0.5]
    check(not early, f"no other execution of the tenant ran while it did ({len(early)} did)")
    check(not other, f"every other try was refused RESOURCE_EXHAUSTED ({other[:1]})")
    check(len(refusals) >= 5 and all("limits.max_executions" in r for r in refusals),
          f"the other session was refused {len(refusals)} times, naming the limit: {refusals[0][:150]}")
    check(scg.metric("scg_executions_refused_total") == len(refusals), "scg counted each refusal")
    t0 = time.monotonic()
    lab.wait_for("the other session to get in", lambda: b.sql("select 1 as x").collect()[0].x == 1, 5, 0.1)
    check(True, f"once the query had ended, the other session got in ({time.monotonic() - t0:.2f} s later)")
    a.stop()
    b.stop()


@scenario
def streaming_listener():
    """Commands that wait rather than compute are not runaways: under
    max_execution_secs 4 and max_executions 1, a StreamingQueryListener keeps
    its events coming past the limit (its stream reattached every 3 s),
    awaitTermination(8) and awaitAnyTermination(6) return normally and take
    no slot, and an ordinary 10 s query is still cut at 4 s."""
    from pyspark.sql.streaming import StreamingQueryListener

    token, backends = servers("spark43a")
    limit = 4
    scg = lab.Scg(tenant_config(backends, token, {"short": {"max_execution_secs": limit, "max_executions": 1}}),
                  lab.workdir("listener"))
    s = connect(scg.url("x-scg-tenant=short"))
    events: list[float] = []  # when each progress event reached the client

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            events.append(time.monotonic())

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    listener = Progress()
    t0 = time.monotonic()
    s.streams.addListener(listener)
    q = (s.readStream.format("rate").option("rowsPerSecond", 10).load()
         .writeStream.format("noop").trigger(processingTime="500 milliseconds").start())
    t1 = time.monotonic()
    ended = q.awaitTermination(limit + 4)
    waited = time.monotonic() - t1
    check(ended is False and waited >= limit + 3,
          f"awaitTermination({limit + 4}) returned False after {waited:.1f} s (limit {limit} s)")
    t1 = time.monotonic()
    ended = s.streams.awaitAnyTermination(limit + 2)
    waited = time.monotonic() - t1
    check(ended is False and waited >= limit + 1,
          f"awaitAnyTermination({limit + 2}) returned False after {waited:.1f} s")
    before = len([e for e in events if e <= t0 + limit])
    after = len([e for e in events if e > t0 + limit + 2])
    print(f"  progress events: {before} in the first {limit} s, {after} after {limit + 2} s "
          f"({len(events)} in {time.monotonic() - t0:.1f} s)")
    check(after > 0, f"listener events kept coming after the limit ({after} after {limit + 2} s)")
    check(s.streams._sqlb._listener_bus == [listener], "the client still has its listener (its stream was not cut)")
    check(q.isActive, "the streaming query still runs")
    t2 = time.monotonic()
    try:
        s.sql(sleep_sql(10000)).collect()
        raise AssertionError(f"a 10 s query under a {limit} s limit completed ({time.monotonic() - t2:.1f} s)")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        secs = time.monotonic() - t2
        check("max_execution_secs" in error_text(e), f"an ordinary 10 s query is still cut: {error_text(e)[:120]}")
        check(secs < limit + 4, f"after {secs:.1f} s (limit {limit} s)")
    late = len([e for e in events if e > t2])
    check(late > 0 and s.streams._sqlb._listener_bus == [listener],
          f"the listener outlived the cut query ({late} events since)")
    q.stop()
    s.streams.removeListener(listener)
    check(scg.metric("scg_executions_killed_total") == 1, "scg_executions_killed_total is 1: only the ordinary query")
    refused = scg.metric("scg_executions_refused_total")
    check(refused == 0, f"no execution was refused for a slot ({refused:.0f}): the waiting ones held none")
    reattach = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"})
    check(reattach >= 3, f"the waiting streams were reattached {reattach:.0f} times through scg")
    s.stop()


@scenario
def rate_limited_continuations():
    """A user limited to 1 call/s (burst 4) still completes a 60 MB toPandas
    and an 8 s query: ReattachExecute and ReleaseExecute of an admitted
    operation are not rate limited."""
    token, backends = servers("spark43a")
    cfg = lab.base_config(backends, token, rate_limits={"per_user": {"rps": 1, "burst": 4}})
    scg = lab.Scg(cfg, lab.workdir("rate"))
    s = connect(scg.url())
    n = 1_500_000
    pdf = s.range(0, n, 1, 4).selectExpr("id", "repeat('x', 32) as pad").toPandas()
    check(len(pdf) == n, f"{n} rows")
    time.sleep(3)  # the bucket refills 3 calls (PySpark 4.0 does not wait out a refusal): time, not an event
    check(s.sql(sleep_sql(8000)).collect()[0].answer == 42, "the 8 s query completed")
    refused = {r: scg.metric("scg_forward_rpcs_total", {"rpc": r, "code": "RESOURCE_EXHAUSTED"})
               for r in ("ReattachExecute", "ReleaseExecute")}
    check(sum(refused.values()) == 0, f"no continuation was refused: {refused}")
    s.stop()


# --- interrupts, artifacts, clones -------------------------------------------------------------


# How soon after an interrupt call is sent its query must have ended (measured:
# docs/compatibility.md, `interrupts`).
INTERRUPT_SECS = 1.0


@scenario
def interrupts():
    """interruptTag() and interruptAll() through scg stop a running query
    within INTERRUPT_SECS, also after the query's stream was reattached."""
    token, backends = servers("spark43a", "spark43b")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("intr"))
    s = connect(scg.url())
    latencies = []
    for how, after_reattach in (("tag", False), ("all", False), ("tag", True)):
        out = {}
        df = s.sql(sleep_sql(30000))
        known = operations_of(scg, s)
        plans = scg.metric("scg_forward_rpcs_total", {"rpc": "ExecutePlan", "code": "OK"})

        def run():
            s.addTag("slow")  # tags belong to the thread that runs the query
            t0 = time.monotonic()
            try:
                df.collect()
                out["result"] = "completed"
            except Exception as e:  # noqa: BLE001
                out["result"] = error_text(e)
            out["end"] = time.monotonic()
            out["secs"] = out["end"] - t0
            s.clearTags()
        t = threading.Thread(target=run)
        t.start()
        new_operation(scg, s, known)
        if after_reattach:
            # Its first stream ended (the server cut it at 3 s) and a ReattachExecute is open.
            lab.wait_for("the query's stream to be cut and reattached", lambda: scg.metric(
                "scg_forward_rpcs_total", {"rpc": "ExecutePlan", "code": "OK"}) > plans and
                scg.metric("scg_forward_active_streams") >= 1, 10, 0.05)
        call = {}

        def interrupt():  # until the server has registered the operation
            call["at"] = time.monotonic()
            return s.interruptTag("slow") if how == "tag" else s.interruptAll()
        ids = lab.wait_for("an interrupt that names the operation", interrupt, 5, 0.05)
        t.join(40)
        latency = out.get("end", float("inf")) - call["at"]
        latencies.append(latency)
        check(len(ids) == 1, f"interrupt{how.title()}() named one operation"
                             f"{' after its stream was reattached' if after_reattach else ''}")
        check(out.get("result") != "completed" and latency < INTERRUPT_SECS,
              f"the query ended {latency:.2f} s after the interrupt ({out.get('secs', 0):.1f} s after it began): "
              f"{out.get('result', '')[:90]}")
    print(f"  interrupt to end of query: {', '.join(f'{x:.2f}' for x in latencies)} s")
    check(s.range(5).count() == 5, "the session works on")
    s.stop()


@scenario
def artifacts_udf():
    """addArtifacts of a Python file, then a UDF that imports it, through scg."""
    from pyspark.sql.functions import udf
    token, backends = servers("spark43a", "spark43b")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("art"))
    s = connect(scg.url())
    d = lab.workdir("artfile")
    mod = d / "scg_rs_helper.py"
    mod.write_text("def times_seven(x):\n    return x * 7\n")
    s.addArtifacts(str(mod), pyfile=True)

    @udf("long")
    def seven(x):
        import scg_rs_helper
        return scg_rs_helper.times_seven(x)
    rows = s.range(1, 6).select(seven("id").alias("y")).collect()
    check([r.y for r in rows] == [7, 14, 21, 28, 35], "the UDF imported the uploaded module on the server")
    s.stop()


@scenario
def clone_session():
    """cloneSession() (4.1+) lands with its parent, also when the clone's first
    call reaches another replica of a 3-replica cluster."""
    if tuple(int(x) for x in CLIENT.split(".")[:2]) < (4, 1):
        print(f"clone_session needs a 4.1+ client, this is {CLIENT}")
        sys.exit(1)
    token, backends = servers("spark43a", "spark43b")
    cluster = Cluster(backends, token, 3, "clone")
    first, other = cluster.replicas[0], cluster.replicas[1]
    for i in range(4):
        parent = connect(first.url())
        parent.sql(f"create or replace temp view pv as select {i} as n")
        clone_id = str(uuid.uuid4())
        parent.cloneSession(clone_id)
        # The clone's first call goes through another replica.
        clone = SparkSession.builder.remote(other.url(f"session_id={clone_id}")).create()
        check(clone.sql("select n from pv").collect()[0].n == i,
              f"clone {i} reached its parent's server through another replica and saw its view")
        clone.stop()
        parent.stop()


@scenario
def get_status():
    """GetStatus (Spark 4.1+) through another replica of a 3-replica cluster
    reaches the session's server: a running operation's state differs from
    that of an id the server never saw."""
    token, backends = servers("spark43a", "spark43b")
    cluster = Cluster(backends, token, 3, "status")
    s = connect(cluster.replicas[0].url())
    s.range(1).count()
    t = threading.Thread(target=lambda: s.sql(sleep_sql(6000)).collect())
    t.start()
    running = lab.wait_for("the running operation in scg's listing", lambda: [
        o["operation_id"] for o in cluster.replicas[0].get("/api/v1/operations?limit=100")["operations"]
        if o["session_id"] == s.client._session_id], 10)

    def status_of(op: str) -> bytes:
        body = (ld(1, s.client._session_id.encode()) + ld(2, ld(1, (s.client._user_id or "").encode())) +
                ld(5, ld(1, op.encode())))
        return raw_call(cluster.replicas[1].grpc, "GetStatus", body)
    live = status_of(running[-1])
    unknown = status_of(str(uuid.uuid4()))
    check(running[-1].encode() in live, "the answer names the running operation")
    # OperationStatus.state is its last field (2, a varint): tag 0x10, then the value.
    def state(resp: bytes) -> int:
        return resp[resp.rindex(b"\x10") + 1]
    check(state(live) != state(unknown), f"its state ({state(live)}) is not an unknown operation's ({state(unknown)})")
    t.join(30)
    s.stop()


# --- failures: replicas and backends ------------------------------------------------------------


class Cluster:
    """N scg replicas on loopback forming one cluster."""

    def __init__(self, backends, token, n, tag, **extra):
        self.dir = lab.workdir(tag)
        # Each replica's seeds name the others' cluster ports before they run: free
        # ports, released and then bound by scg; a replica that finds its port
        # taken exits, and the cluster is started again on fresh ports.
        for attempt in range(1, 4):
            peer_ports = [lab.free_port() for _ in range(n)]
            self.replicas = []
            try:
                for i in range(n):
                    cfg = lab.base_config(backends, token, **extra)
                    cfg["cluster"] = {"node_name": f"scg-{i}", "bind_addr": f"127.0.0.1:{peer_ports[i]}",
                                      "seeds": [f"127.0.0.1:{p}" for j, p in enumerate(peer_ports) if j != i],
                                      "heartbeat_interval_ms": 250, "connection_timeout_ms": 1000}
                    name = f"scg-{i}" if attempt == 1 else f"scg-{i}-try{attempt}"
                    self.replicas.append(lab.Scg(cfg, self.dir, name))
                break
            except AssertionError as e:
                for r in self.replicas:
                    r.kill()
                if attempt == 3 or "in use" not in str(e):
                    raise
        lab.wait_for("the cluster to sync", lambda: all(r.ready() for r in self.replicas), 30)


class Balancer:
    """A TCP forwarder standing in for a Kubernetes Service: each new
    connection goes to the first replica that accepts it."""

    def __init__(self, ports):
        import socket
        self.ports = list(ports)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            c, _ = self.sock.accept()
            for p in self.ports:
                u = socket.socket()
                if u.connect_ex(("127.0.0.1", p)) == 0:
                    break
                u.close()
            else:
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(2)
            except OSError:
                pass


@scenario
def replica_killed():
    """A replica SIGKILLed during a long collect(): the client's next
    reattach reaches another replica, which routes it to the same server; the
    query returns its rows once."""
    token, backends = servers("spark43a", "spark43b")
    cluster = Cluster(backends, token, 3, "rkill")
    lb = Balancer([r.grpc for r in cluster.replicas])
    s = connect(f"sc://127.0.0.1:{lb.port}/")
    check(s.range(10).count() == 10, "a session through the balancer (replica scg-0)")
    out = {}
    df = s.sql("select id, reflect('java.lang.Thread', 'sleep', cast(if(id = 0, 9000, 0) as bigint)) "
               "as z from range(0, 1000, 1, 2)")
    known = operations_of(cluster.replicas[0], s)

    def run():
        try:
            out["rows"] = df.collect()
        except Exception as e:  # noqa: BLE001
            out["error"] = error_text(e)
    t = threading.Thread(target=run)
    t.start()
    new_operation(cluster.replicas[0], s, known)  # the collect runs through scg-0
    on = {r["session_id"]: r["backend"] for r in sessions_listing(cluster.replicas[0])}[s.client._session_id]
    lab.wait_for(f"the query's job to run on {on}",
                 lambda: running_jobs(next(b for b in backends if b["name"] == on)), 10, 0.05)
    cluster.replicas[0].kill()
    t.join(60)
    check("error" not in out, f"collect() went on after the replica died ({out.get('error', 'no error')[:200]})")
    ids = sorted(r.id for r in out["rows"])
    check(ids == list(range(1000)), "every row exactly once")
    reattach = sum(r.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute", "code": "OK"})
                   for r in cluster.replicas[1:])
    check(reattach >= 1, f"the surviving replicas continued it ({reattach:.0f} reattaches)")
    check(s.range(3).count() == 3, "the session goes on through another replica")
    s.stop()


def scg_beside_own_server(tag: str, name: str, on_backend_lost: dict):
    """A Spark 4.3 server of the scenario's own (to kill or freeze) beside
    the shared ones, and scg in front of them all, placing round robin."""
    token, backends = servers("spark43a")
    work = lab.workdir(tag)
    own = lab.start_spark(name, "4.3", work, token)
    lab.wait_spark_ready(own)
    cfg = lab.base_config([own] + backends, token, placement={"strategy": "round_robin"},
                          on_backend_lost=on_backend_lost)
    return own, lab.Scg(cfg, work)


def backend_down(scg, name: str) -> bool:
    """scg's admin API lists backend `name` unhealthy."""
    return not next(b for b in scg.get("/api/v1/backends")["backends"] if b["name"] == name)["healthy"]


def stop_all(sessions) -> None:
    """Stops every session, whatever state its server is in."""
    for x in sessions:
        try:
            x.stop()
        except Exception:  # noqa: BLE001
            pass


def sessions_on_victim(scg, n: int):
    """`n` new sessions through scg, each used once; those placed on "victim"."""
    sessions = [connect(scg.url()) for _ in range(n)]
    for x in sessions:
        x.range(1).count()
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    return sessions, [x for x in sessions if rows.get(x.client._session_id) == "victim"]


@scenario
def backend_killed():
    """A server killed: new sessions go to the other one, and the session it
    held gets a clear error naming it (on_backend_lost: fail)."""
    victim, scg = scg_beside_own_server("bkill", "victim", {"after_secs": 2, "action": "fail"})
    sessions, on_victim = sessions_on_victim(scg, 2)
    check(len(on_victim) == 1, "one session on each server")
    lab.kill_tree(victim["pid"])
    t_kill = time.monotonic()

    lab.wait_for("scg to see the killed server down", lambda: backend_down(scg, "victim"), 10, 0.1)
    check(True, f"scg sees the killed server down after {time.monotonic() - t_kill:.1f} s")
    fresh = [connect(scg.url()) for _ in range(3)]
    for s in fresh:
        check(s.range(4).count() == 4, "a new session works")
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    check(all(rows[s.client._session_id] == "spark43a" for s in fresh), "new sessions went to the live server")
    t0 = time.monotonic()
    try:
        on_victim[0].range(3).count()
        raise AssertionError("a call of the dead server's session succeeded")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        msg = error_text(e)
        check(grpc_code(e) == "FAILED_PRECONDITION" and "victim" in msg and f":{victim['grpc']}" in msg,
              f"the lost session's call fails {grpc_code(e)} naming the server, "
              f"{time.monotonic() - t_kill:.1f} s after the kill: {msg[:200]}")
    check(scg.metric("scg_forward_backend_lost_total") >= 1, "scg_forward_backend_lost_total counts it")


@scenario
def backend_replayed():
    """on_backend_lost: replay. A server SIGKILLed: its sessions go on on the
    other server with their SQL conf (Config and SET), temp views from SQL and
    from a DataFrame (small local data, and local data above the cache
    threshold: an artifact), a Python UDF, a module added with addArtifacts
    and used by a UDF, a session variable and the current database, under the
    server-side id their client first observed (no SESSION_CHANGED); a query
    running at the kill fails with scg's error naming the server, and its
    session's next query works; a session that made a localCheckpoint is told
    it cannot be restored, and why."""
    import pyspark.sql.functions as F
    victim, scg = scg_beside_own_server("breplay", "victim", {"after_secs": 2, "action": "replay"})
    sessions, on_victim = sessions_on_victim(scg, 6)
    check(len(on_victim) == 3, "three sessions on the victim")
    s, running, _ = on_victim
    # The database exists on both servers (each has its own catalog).
    for x in (s, next(x for x in sessions if x not in on_victim)):
        x.sql("CREATE DATABASE IF NOT EXISTS scg_replay_db")
    s.sql("USE scg_replay_db")
    mod = lab.workdir("breplay-art") / "scg_replay_mod.py"
    mod.write_text("def times_seven(x):\n    return x * 7\n")
    s.addArtifacts(str(mod), pyfile=True)

    @F.udf("long")
    def seven(x):
        import scg_replay_mod
        return scg_replay_mod.times_seven(x)
    s.conf.set("spark.sql.session.localRelationCacheThreshold", "1024")
    s.createDataFrame([(i, f"row-{i}") for i in range(2000)], ["i", "r"]).createOrReplaceTempView("v_cached")
    check(scg.metric("scg_spool_bytes") > 1024, "the module and the cached local data are spooled")

    s.conf.set("spark.sql.shuffle.partitions", "7")
    s.sql("SET scg.test.mark=42")
    s.sql("SET scg.test.dropped=1")
    s.sql("RESET scg.test.dropped")
    s.sql("CREATE TEMP VIEW v_sql AS SELECT id * 2 AS d FROM range(5)")
    s.createDataFrame([(1, "a"), (2, "b"), (3, "c")], ["n", "t"]).createOrReplaceTempView("v_df")
    s.udf.register("plus_one", lambda x: x + 1, "long")
    s.sql("DECLARE VARIABLE scg_var INT DEFAULT 5")

    def observe(x):
        return {
            "partitions": x.conf.get("spark.sql.shuffle.partitions"),
            "mark": x.sql("SET scg.test.mark").collect()[0][1],
            "dropped": x.conf.get("scg.test.dropped", "<unset>"),
            "v_sql": x.sql("SELECT sum(d) AS s FROM v_sql").collect()[0].s,
            "v_df": sorted(r.t for r in x.table("v_df").collect()),
            "udf": x.sql("SELECT plus_one(41) AS y").collect()[0].y,
            "var": x.sql("SELECT scg_var AS v").collect()[0].v,
            "db": x.sql("SELECT current_database() AS d").collect()[0].d,
            "module": [r.y for r in x.range(1, 4).select(seven("id").alias("y")).collect()],
            "v_cached": tuple(x.sql("SELECT count(*) AS c, sum(i) AS t FROM v_cached").collect()[0]),
        }
    before = observe(s)
    check(before == {"partitions": "7", "mark": "42", "dropped": "<unset>", "v_sql": 20, "v_df": ["a", "b", "c"],
                     "udf": 42, "var": 5, "db": "scg_replay_db", "module": [7, 14, 21],
                     "v_cached": (2000, 1999000)}, f"the session's state before the kill: {before}")
    # PySpark 4.3 finds a localCheckpoint's data only in the first session of
    # its process (directly against Spark too): a process of its own makes one,
    # in a session that lands on the victim.
    # It stays alive (killed, never stopped): a stopped session is released.
    ckpt_code = ("import sys, warnings; warnings.filterwarnings('ignore')\n"
                 "from pyspark.sql import SparkSession\n"
                 "s = SparkSession.builder.remote(sys.argv[1]).create()\n"
                 "assert s.range(10).localCheckpoint().count() == 10\n"
                 "print(s.client._session_id, flush=True)\n"
                 "sys.stdin.readline()\n"
                 "try:\n"
                 "    s.range(2).count()\n"
                 "    print('OK', flush=True)\n"
                 "except Exception as e:\n"
                 "    print('ERR ' + ' '.join(str(e).split())[:400], flush=True)\n"
                 "sys.stdin.read()\n")
    ckpt_session, holders = "", []
    for _ in range(4):
        p = subprocess.Popen([sys.executable, "-c", ckpt_code, scg.url()], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        holders.append(p)
        sid = (p.stdout.readline() or "").strip()
        check(sid != "", "a localCheckpoint through scg works")
        if {x["session_id"]: x["backend"] for x in sessions_listing(scg)}.get(sid) == "victim":
            ckpt_session = sid
            break
    check(ckpt_session != "", "a checkpointed session on the victim")
    check(scg.metric("scg_sessions_unreplayable", {"reason": "checkpoint"}) >= 1,
          "the localCheckpoint marks its session unreplayable")
    observed = s.client._server_session_id

    outcome = {}

    def long_query():
        t0 = time.monotonic()
        try:
            running.sql(sleep_sql(60000)).collect()
            outcome["error"] = None
        except Exception as e:  # noqa: BLE001
            outcome["error"] = e
        outcome["took"] = time.monotonic() - t0
    worker = threading.Thread(target=long_query)
    worker.start()
    lab.wait_for("the long query to run on the victim", lambda: running_jobs(victim), 30, 0.2)
    lab.kill_tree(victim["pid"])
    t_kill = time.monotonic()

    after = observe(s)
    check(after == before, f"the same results after the kill ({time.monotonic() - t_kill:.1f} s): {after}")
    check(s.client._server_session_id == observed, "the client still sees its first server-side session id")
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    check(rows[s.client._session_id] == "spark43a", "the session now lives on the other server")
    check(scg.metric("scg_replays_total") >= 1, "scg_replays_total counts the replay")
    for _ in range(3):
        check(s.range(4).select(F.sum("id")).collect()[0][0] == 6, "the replayed session goes on")

    worker.join(90)
    check(not worker.is_alive(), "the running query ended")
    err = outcome.get("error")
    check(err is not None, "the query running at the kill failed")
    msg = error_text(err)
    check("victim" in msg and "was lost" in msg,
          f"it failed {grpc_code(err)} in {outcome['took']:.1f} s naming the lost server: {msg[:240]}")
    check(running.range(3).count() == 3, "its session's next query works")

    # Its own client's next call, after the kill.
    holder = holders[-1]
    holder.stdin.write("go\n")
    holder.stdin.flush()
    answer = holder.stdout.readline().strip()
    check(answer.startswith("ERR") and "checkpoint" in answer and "victim" in answer,
          f"the checkpointed session is told why it cannot be restored: {answer[:300]}")
    for p in holders:
        p.kill()
        p.wait(10)
    stop_all(sessions)


@scenario
def backend_oom_replayed():
    """The seed's scenario: one session's query drives its server's 512 MiB
    driver out of memory (Spark stops its SparkContext and closes its port);
    another session on that server goes on elsewhere with its state
    (on_backend_lost: replay)."""
    import pyspark.sql.functions as F
    victim, scg = scg_beside_own_server("boom", "victim", {"after_secs": 2, "action": "replay"})
    sessions, on_victim = sessions_on_victim(scg, 4)
    check(len(on_victim) == 2, "two sessions on the victim")
    bystander, culprit = on_victim
    bystander.conf.set("spark.sql.shuffle.partitions", "5")
    bystander.sql("CREATE TEMP VIEW v_by AS SELECT id * 5 AS f FROM range(4)")
    before = (bystander.conf.get("spark.sql.shuffle.partitions"), bystander.sql("SELECT sum(f) FROM v_by").collect()[0][0])
    check(before == ("5", 30), f"the bystander's state: {before}")
    t0 = time.monotonic()
    try:
        culprit.range(0, 30_000_000, numPartitions=1).select(
            F.collect_list(F.expr("repeat('x', 200)")).alias("l")).selectExpr("size(l)").collect()
        raise AssertionError("the query that should exhaust the driver's heap succeeded")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        check(True, f"the culprit's query failed after {time.monotonic() - t0:.1f} s: {error_text(e)[:120]}")
    # Between the SparkContext's stop and its port closing (a few seconds) the
    # server still answers, with errors: scg does not yet count that as down,
    # so the bystander waits for scg to see the server down.
    lab.wait_for("scg to see the out-of-memory server down", lambda: backend_down(scg, "victim"), 60, 0.1)
    check(True, f"scg sees it down {time.monotonic() - t0:.1f} s after the culprit's query started")
    after = (bystander.conf.get("spark.sql.shuffle.partitions"), bystander.sql("SELECT sum(f) FROM v_by").collect()[0][0])
    check(after == before, f"the bystander's state after the driver died: {after}")
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    check(rows[bystander.client._session_id] == "spark43a", "the bystander now lives on the other server")
    check(scg.metric("scg_replays_total") >= 1, "scg_replays_total counts the replay")
    lab.kill_tree(victim["pid"])
    stop_all(sessions)


@scenario
def backend_replayed_clients():
    """on_backend_lost: replay with spark-connect-go and Spark's JVM client:
    a session each on a server that is SIGKILLed between two statements; the
    statements after the kill see the conf and temp view made before it."""
    victim, scg = scg_beside_own_server("breplayc", "victim", {"after_secs": 2, "action": "replay"})
    scg.post("/api/v1/backends/spark43a/drain")  # both sessions land on the victim
    jvm = lab.LAB / "jvmclient"
    cp = f"{jvm / 'classes'}:{(jvm / 'classpath').read_text().strip()}"
    argv = {
        "go": [str(lab.LAB / "goclient"), "-remote", f"sc://127.0.0.1:{scg.grpc}"],
        "jvm": ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
                "-Dio.netty.tryReflectionSetAccessible=true", "-cp", cp, "JvmClient", scg.url()],
    }
    statements = ["SET scg.test.mark=42", "CREATE TEMP VIEW v_c AS SELECT id * 3 AS t FROM range(4)",
                  "select sum(t) from v_c", "--pause", "select sum(t) from v_c", "SET scg.test.mark",
                  "select count(*) from range(5)"]
    procs = {name: subprocess.Popen(a + statements, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for name, a in argv.items()}
    lines = {name: [] for name in procs}
    try:
        for name, p in procs.items():
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                line = p.stdout.readline()
                if not line:
                    break
                if line.startswith("{"):
                    lines[name].append(json.loads(line))
                    if lines[name][-1]["sql"] == "--pause":
                        break
            check(lines[name] and lines[name][-1]["sql"] == "--pause", f"{name}: ran up to the pause: {lines[name]}")
            check(lines[name][2].get("first") == [18], f"{name}: the view before the kill: {lines[name][2]}")
        scg.post("/api/v1/backends/spark43a/undrain")
        check(all(r["backend"] == "victim" for r in sessions_listing(scg)), "both sessions on the victim")
        lab.kill_tree(victim["pid"])
        for p in procs.values():
            p.stdin.write("go\n")
            p.stdin.flush()
        for name, p in procs.items():
            out, _ = p.communicate(timeout=120)
            lines[name] += [json.loads(l) for l in out.splitlines() if l.startswith("{")]
            after = lines[name][4:]
            check(len(after) == 3 and not any(r.get("error") for r in after), f"{name}: no error after the kill: {after}")
            check(after[0].get("first") == [18], f"{name}: the temp view after the kill: {after[0]}")
            check(after[1].get("first") == ["scg.test.mark", "42"], f"{name}: the conf after the kill: {after[1]}")
            check(after[2].get("first") == [5], f"{name}: a query after the kill: {after[2]}")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    check(scg.metric("scg_replays_total") == 2, "both sessions were replayed")


# --- security ----------------------------------------------------------------------------------


TOKEN_PROBES = [
    ("conf.get", lambda s: s.conf.get("spark.connect.authenticate.token", "absent")),
    ("conf.getAll", lambda s: json.dumps(s.conf.getAll) if hasattr(s.conf, "getAll") else ""),
    ("SET", lambda s: str(s.sql("SET").collect())),
    ("SET -v", lambda s: str(s.sql("SET -v").collect())),
    ("SET key", lambda s: str(s.sql("SET spark.connect.authenticate.token").collect())),
    ("${} substitution", lambda s: str(s.sql("select '${spark.connect.authenticate.token}' as t").collect())),
]


def varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def ld(field: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return bytes([field << 3 | 2]) + varint(len(payload)) + payload


def raw_call(port: int, method: str, body: bytes, token: str | None = None) -> bytes:
    """One unary Spark Connect call with a hand-made request, the response's bytes back."""
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    md = [("authorization", f"Bearer {token}")] if token else None
    try:
        return ch.unary_unary(f"/spark.connect.SparkConnectService/{method}")(body, timeout=10, metadata=md)
    finally:
        ch.close()


def config_get_all(scg_port: int, prefix: str, token: str | None = None) -> str:
    """Config get_all(prefix) as raw protobuf (the pairs come back with the
    prefix stripped)."""
    body = ld(1, str(uuid.uuid4()).encode()) + ld(2, ld(1, b"alice")) + ld(3, ld(5, ld(1, prefix.encode())))
    return raw_call(scg_port, "Config", body, token).decode("latin-1")


def config_get_option(port: int, key: str, token: str | None = None) -> str:
    """Config get_option(key) as raw protobuf."""
    body = ld(1, str(uuid.uuid4()).encode()) + ld(2, ld(1, b"alice")) + ld(3, ld(4, ld(1, key.encode())))
    return raw_call(port, "Config", body, token).decode("latin-1")


def token_from_reflect(s: SparkSession, how: str) -> str:
    """What SQL's reflect() reads in the driver: the environment variable or
    the system property that carries Spark's token."""
    call = ("'java.lang.System', 'getenv', 'SPARK_CONNECT_AUTHENTICATE_TOKEN'" if how == "getenv" else
            "'java.lang.System', 'getProperty', 'spark.connect.authenticate.token'")
    return str(s.sql(f"select reflect({call}) as t").collect()[0].t)


@scenario(any_server=True)
def backend_token():
    """Spark started with a token (through its environment): direct access
    without it is refused, access through scg works, and no Config or SQL path
    hands the token to a client; reflect() reads it in the driver (what no
    gateway can hide)."""
    token, backends = servers(SERVER)
    direct = f"sc://127.0.0.1:{backends[0]['grpc']}/"
    try:
        connect(direct).range(1).count()
        raise AssertionError("a client without the token reached Spark directly")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        check("UNAUTHENTICATED" in str(e) or "authenticat" in str(e).lower() or "Invalid" in str(e),
              f"direct access without the token is refused: {error_text(e)[:120]}")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("tok"))
    s = connect(scg.url())
    check(s.range(3).count() == 3, "access through scg (which sends the token) works")
    check_runs_on(s, backends[0])
    for name, probe in TOKEN_PROBES:
        got = probe(s)
        check(token not in got, f"{name} does not show the token")
    for prefix in ("", "spark.connect.", "spark.connect.authenticate."):
        check(token not in config_get_all(scg.grpc, prefix), f"Config get_all(prefix={prefix!r}) does not show it")
    check(token not in config_get_option(scg.grpc, "spark.connect.authenticate.token"),
          "Config get_option does not show it")
    check(token_from_reflect(s, "getenv") == token, "reflect(System.getenv) returns it in the driver")
    s.stop()


@scenario(any_server=True)
def token_in_sparkconf():
    """A server of SERVER's version given its token by --conf (SparkConf)
    instead of its environment: no Config call or SQL shows it, neither the
    server's own answers (asked directly, scg's redaction not in the way)
    nor anything through scg; reflect() reads it as a system property."""
    _, shared = servers(SERVER)
    version = shared[0]["version"]
    token = "conf-token-" + uuid.uuid4().hex
    work = lab.workdir("tokconf")
    srv = lab.start_spark("confsrv", version, work, None, conf={"spark.connect.authenticate.token": token})
    lab.wait_spark_ready(srv)
    try:
        check("confsrv" in config_get_all(srv["grpc"], "", token),
              "the server answers Config get_all itself (its app name is in the answer)")
        for prefix in ("", "spark.connect.", "spark.connect.authenticate."):
            check(token not in config_get_all(srv["grpc"], prefix, token),
                  f"its answer to get_all(prefix={prefix!r}) does not hold the token")
        check(token not in config_get_option(srv["grpc"], "spark.connect.authenticate.token", token),
              "nor its answer to get_option")
        scg = lab.Scg(lab.base_config([srv], token), work)
        s = connect(scg.url())
        check_runs_on(s, shared[0])
        for name, probe in TOKEN_PROBES:
            check(token not in probe(s), f"{name} through scg does not show the token")
        for prefix in ("", "spark.connect.", "spark.connect.authenticate."):
            check(token not in config_get_all(scg.grpc, prefix), f"Config get_all(prefix={prefix!r}) through scg")
        check(token not in config_get_option(scg.grpc, "spark.connect.authenticate.token"),
              "Config get_option through scg")
        check(token_from_reflect(s, "getProperty") == token, "reflect(System.getProperty) returns it in the driver")
        s.stop()
    finally:
        lab.kill_tree(srv["pid"])


@scenario
def tenants_isolated():
    """Two tenants whose clients use the same user id and session id land in
    two Spark sessions, also on one server."""
    token, backends = servers("spark43a")
    cfg = lab.base_config(backends, token,
                          tenants={"from": "header", "header": "x-scg-tenant", "on_missing": "reject"})
    scg = lab.Scg(cfg, lab.workdir("ten"))
    sid = str(uuid.uuid4())
    a = SparkSession.builder.remote(scg.url(f"user_id=bob;session_id={sid};x-scg-tenant=red")).create()
    b = SparkSession.builder.remote(scg.url(f"user_id=bob;session_id={sid};x-scg-tenant=blue")).create()
    a.sql("create or replace temp view secret as select 'red data' as d")
    try:
        got = b.sql("select d from secret").collect()
        raise AssertionError(f"tenant blue read tenant red's view: {got}")
    except AssertionError:
        raise
    except Exception as e:  # noqa: BLE001
        check("TABLE_OR_VIEW_NOT_FOUND" in str(e), "tenant blue does not see tenant red's temp view")
    b.sql("create or replace temp view secret as select 'blue data' as d")
    check(a.sql("select d from secret").collect()[0].d == "red data", "each tenant keeps its own session state")
    a.stop()
    b.stop()


# Which server versions send the plan's metrics with a collect's last
# ExecutePlanResponse (numOutputRows among them; measured by usage_accounting).
SENDS_PLAN_METRICS = {"4.3": True, "4.0": True}


@scenario(any_server=True)
def usage_accounting():
    """scg's per-tenant usage is what PySpark received and what Spark reported:
    the rows of two collects (the arrow batches' row_count, read by scg as they
    pass) equal the rows PySpark got and Spark's numOutputRows (sent by the
    versions in SENDS_PLAN_METRICS); the tenant's ExecutePlan calls are its
    executions; another tenant's figures do not move."""
    token, backends = servers(SERVER)
    cfg = lab.base_config(backends, token,
                          tenants={"from": "header", "header": "x-scg-tenant", "on_missing": "reject"})
    scg = lab.Scg(cfg, lab.workdir("usage"))
    s = connect(scg.url("x-scg-tenant=billing"))
    check_runs_on(s, backends[0])
    other = connect(scg.url("x-scg-tenant=bystander"))
    check(other.sql("select 1 as one").collect()[0].one == 1, "the bystander tenant runs one query")

    def figure(name, tenant="billing", **labels):
        return scg.metric(name, {"tenant": tenant, **labels})

    def settled():  # calls are counted when they end
        lab.wait_for("calls to end", lambda: scg.metric("scg_forward_active_calls") == 0, 10)

    settled()
    rows0, exec0, bytes0 = figure("scg_tenant_result_rows_total"), figure("scg_tenant_executions_total"), \
        figure("scg_tenant_result_bytes_total")
    plans0 = figure("scg_tenant_rpcs_total", method="ExecutePlan")
    bystander0 = figure("scg_tenant_result_rows_total", "bystander")
    df = s.range(0, 250000, 1, 4).selectExpr("id", "id * 2 as twice")
    got = df.collect()
    check(len(got) == 250000 and got[-1].twice == 2 * 249999, "PySpark received 250000 rows")
    small = s.sql("select id from range(1234)").toPandas()
    check(len(small) == 1234, "PySpark received 1234 more rows")
    settled()
    rows = figure("scg_tenant_result_rows_total") - rows0
    check(rows == 250000 + 1234, f"scg counted the rows PySpark received for tenant billing ({rows:.0f})")
    plans = figure("scg_tenant_rpcs_total", method="ExecutePlan") - plans0
    executions = figure("scg_tenant_executions_total") - exec0
    check(executions == plans and executions >= 2,
          f"every ExecutePlan that reached Spark is an execution ({executions:.0f} of {plans:.0f})")
    check(figure("scg_tenant_result_bytes_total") - bytes0 > 250000 * 8, "the result bytes hold at least the ids")
    check(figure("scg_tenant_result_rows_total", "bystander") == bystander0, "the bystander's rows did not move")
    # PySpark 4.0+ keeps the metrics Spark sent with the last execution (ExecutePlanResponse.metrics).
    info = getattr(df, "executionInfo", None)
    collected = info.metrics if info is not None else None
    reported = [m.value for plan in (collected._metrics if collected is not None else [])
                for m in plan.metrics if m.name == "numOutputRows"]
    version = backends[0]["version"]
    if SENDS_PLAN_METRICS[version]:
        check(250000 in reported, f"Spark {version}'s own numOutputRows says 250000 ({reported})")
    else:
        check(not reported, f"Spark {version} sends no numOutputRows ({reported})")
    usage = scg.get("/api/v1/usage?window=15m&tenant=billing")["rows"]
    check(len(usage) == 1 and usage[0]["result_rows"] >= 250000 + 1234,
          f"GET /api/v1/usage shows the tenant's rows ({usage[0]['result_rows'] if usage else None})")
    s.stop()
    other.stop()


@scenario
def health_probe_quiet():
    """scg's health probes are valid, authenticated requests: on a server of
    its own that logs every RPC it answers (Spark's LoggingInterceptor), 30
    probes every 250 ms are answered by the driver, and the driver logs
    nothing at WARN or ERROR meanwhile."""
    token, _ = servers("spark43b")
    work = lab.workdir("probe")
    server = lab.start_spark("probed", "4.3", work, token, conf={
        "spark.connect.grpc.interceptor.classes": "org.apache.spark.sql.connect.service.LoggingInterceptor"})
    lab.wait_spark_ready(server)
    try:
        before = lab.log_size(server["log"])

        def answered() -> int:  # each answer is one log record; nothing but the probes calls this server
            with open(server["log"], "rb") as f:
                f.seek(before)
                return f.read().count(b"Responding to RPC spark.connect.SparkConnectService/Config")
        cfg = lab.base_config([server], token, health={"interval_ms": 250, "timeout_ms": 1000, "failures": 3,
                                                       "successes": 1})
        scg = lab.Scg(cfg, work)
        t0 = time.monotonic()
        n = lab.wait_for("30 probes answered by the driver", lambda: (c := answered()) >= 30 and c, 20, 0.25)
        check(True, f"the driver answered {n} probes in {time.monotonic() - t0:.1f} s")
        with open(server["log"], "rb") as f:
            f.seek(before)
            check(b"scg-health-probe" in f.read(), "they are scg's probes (user scg-health-probe)")
        b = scg.get("/api/v1/backends")["backends"][0]
        check(b["healthy"] is True, "the server is healthy by its probes")
        lines = lab.warn_error_lines(server["log"], before)
        check(not lines, f"the driver logged no WARN/ERROR during the probes ({lines[:2]})")
    finally:
        lab.kill_tree(server["pid"])


@scenario
def quiet_stream():
    """A query quiet for 20 s: Spark's default stream duration (2 min, so no
    cut), no progress reports and no server PINGs (both on by default in
    4.3, and each would break the silence). scg's keepalive PINGs it after
    2 s of silence, within grpc-java's policy (Spark 4.3 permits a PING
    every 10 s, counted from the connection's start too; the third strike
    closes the connection with its calls, too_many_pings): 2 PINGs, then
    none; the connection stays and the query returns its row."""
    token, _ = servers("spark43a")
    work = lab.workdir("quiet")
    server = lab.start_spark("quiet", "4.3", work, token,
                             conf={"spark.connect.execute.reattachable.senderMaxStreamDuration": "120s",
                                   "spark.connect.progress.reportInterval": "-1",
                                   "spark.connect.grpc.keepAlive.enabled": "false"})
    lab.wait_spark_ready(server)
    try:
        scg = lab.Scg(lab.base_config([server], token, keepalive={"interval_secs": 2, "timeout_secs": 2}), work)
        s = connect(scg.url())
        rows = s.sql(sleep_sql(20000)).collect()
        check(rows[0].answer == 42, "the 20 s query returned its row")
        pings = scg.metric("scg_keepalive_backend_pings_total")
        check(pings >= 2, f"scg PINGed the quiet server ({pings:.0f} PINGs in 20 s)")
        check(scg.metric("scg_keepalive_backend_timeouts_total") == 0, "and every PING was answered")
        check(scg.metric("scg_forward_backend_unavailable_total") == 0,
              "the server never closed the connection under the query (too_many_pings)")
        log = lab.warn_error_lines(server["log"], 0)
        check(not [line for line in log if "too_many_pings" in line or "Too many pings" in line],
              "the server never saw too many PINGs")
        s.stop()
    finally:
        lab.kill_tree(server["pid"])


@scenario
def driver_pause():
    """A driver frozen for 35 s (SIGSTOP, as a long full GC) with
    on_backend_lost.after_secs 60: its session is not rebound and finds its
    state after the pause; new sessions meanwhile go to the other server. A
    query in flight has its stream cut by scg's keepalive (UNAVAILABLE after
    about 18 s of silence); PySpark reattaches until the driver is back and
    gets its row."""
    frozen, scg = scg_beside_own_server("pause", "frozen", {"after_secs": 60, "action": "rebind"})
    s = None
    for _ in range(4):
        c = connect(scg.url())
        c.sql("create or replace temp view keep as select 'still here' as w")
        rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
        if rows.get(c.client._session_id) == "frozen":
            s = c
            break
    check(s is not None, "a session on the server to freeze")
    in_flight = {}
    df = s.sql(sleep_sql(4000))

    def query():
        try:
            in_flight["rows"] = df.collect()
        except Exception as e:  # noqa: BLE001 - reported by the check below
            in_flight["error"] = repr(e)

    runner = threading.Thread(target=query, daemon=True)
    runner.start()
    # The query runs on the driver, its stream open through scg.
    lab.wait_for("the query's job to run on the server to freeze", lambda: running_jobs(frozen), 10, 0.05)
    lab.kill_tree(frozen["pid"], signal.SIGSTOP)
    paused = time.monotonic()
    pause_secs = 35
    try:
        lab.wait_for("scg to see the frozen server unhealthy", lambda: backend_down(scg, "frozen"), 10, 0.1)
        fresh = connect(scg.url())
        check(fresh.range(2).count() == 2, "a new session during the pause works")
        rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
        check(rows[fresh.client._session_id] == "spark43a", "and went to the other server")
        time.sleep(max(0.0, paused + pause_secs - time.monotonic()))  # the pause itself: its length is the test
    finally:
        lab.kill_tree(frozen["pid"], signal.SIGCONT)
    check(scg.metric("scg_router_rebinds_total") == 0, "nothing was rebound during the 35 s pause")
    runner.join(120)
    rows = in_flight.get("rows")
    check(rows is not None and rows[0].answer == 42,
          f"the query in flight during the pause returned its row ({in_flight.get('error', 'ok')})")
    check(scg.metric("scg_keepalive_backend_timeouts_total") >= 1, "scg's keepalive cut its silent stream")
    check(s.sql("select w from keep").collect()[0].w == "still here", "after the pause the session has its state")
    lab.kill_tree(frozen["pid"])


@scenario(any_server=True)
def tls_token():
    """PySpark's token= turns on TLS: through scg's TLS front door with a
    private CA (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), checked by scg's static auth."""
    token, backends = servers(SERVER)
    work = lab.workdir("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=scg-test-ca",
                    "-keyout", work / "ca.key", "-out", work / "ca.pem"], check=True, capture_output=True)
    (work / "ext.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    subprocess.run(["openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-keyout", work / "tls.key", "-out", work / "tls.csr"], check=True, capture_output=True)
    subprocess.run(["openssl", "x509", "-req", "-in", work / "tls.csr", "-CA", work / "ca.pem", "-CAkey", work / "ca.key",
                    "-CAcreateserial", "-days", "2", "-extfile", work / "ext.cnf", "-out", work / "tls.crt"],
                   check=True, capture_output=True)
    client_token = "client-" + uuid.uuid4().hex
    cfg = lab.base_config(backends, token, tls={"cert_file": str(work / "tls.crt"), "key_file": str(work / "tls.key")},
                          auth={"type": "static", "tokens": [{"token": client_token, "user_id": "carol"}]})
    scg = lab.Scg(cfg, work)
    code = ("import sys; from pyspark.sql import SparkSession as S; "
            "s = S.builder.remote(sys.argv[1]).create(); print(s.range(7).count(), s.version)")
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(work / "ca.pem"))

    def run(url: str, extra_env=None):
        r = subprocess.run([sys.executable, "-c", code, url], env=dict(env, **(extra_env or {})),
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout.split(), r.stderr
    # A host other than "localhost": token= means TLS (ssl_channel_credentials).
    rc, out, err = run(f"sc://127.0.0.1:{scg.grpc}/;token={client_token}")
    check(rc == 0 and out[:1] == ["7"], f"a query over TLS with token= works ({err[-300:]})")
    version = (out[1:2] or ["?"])[0]
    check(version.startswith(backends[0]["version"] + "."), f"on Spark {version} ({backends[0]['name']})")
    users = {r["user_id"] for r in sessions_listing(scg)}
    check(users == {"carol"}, f"the session is the verified user's ({users})")
    rc, out, err = run(f"sc://127.0.0.1:{scg.grpc}/;token=wrong")
    check(rc != 0 and "UNAUTHENTICATED" in err, "a wrong token is refused UNAUTHENTICATED")
    # Spark's JVM client: token= means TLS there too, checked against the JVM's trust store.
    subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "scg-test-ca", "-file", work / "ca.pem",
                    "-keystore", work / "trust.p12", "-storepass", "changeit", "-storetype", "PKCS12"],
                   check=True, capture_output=True)
    trust = (f"-Djavax.net.ssl.trustStore={work / 'trust.p12'}", "-Djavax.net.ssl.trustStorePassword=changeit")
    out = jvm_client(f"sc://127.0.0.1:{scg.grpc}/;token={client_token}", "select count(*) from range(7)",
                     jvm_opts=trust, timeout=90)
    check(out[0].get("first") == [7], f"the JVM client over TLS with token= works ({out[0]})")
    # Plaintext alternatives, through a front door without TLS.
    plain = lab.Scg({k: v for k, v in cfg.items() if k != "tls"}, work, "plain")
    rc, out, err = run(f"sc://localhost:{plain.grpc}/;token={client_token}")
    check(rc == 0 and out[:1] == ["7"],
          f"host localhost: token= goes over gRPC local credentials, plaintext on loopback ({err[-200:]})")
    rc, out, err = run(f"sc://127.0.0.1:{plain.grpc}/;authorization=Bearer {client_token}")
    check(rc == 0 and out[:1] == ["7"],
          f"any host: an 'authorization' parameter is sent as metadata on a plaintext channel ({err[-200:]})")


# --- clients -------------------------------------------------------------------------------------


def client_lines(name: str, argv: list, timeout: float) -> list[dict]:
    """Runs a client program that prints one JSON line per statement."""
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    lines = [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise AssertionError(f"{name} printed nothing (exit {r.returncode}): {r.stderr[-600:]}")
    return lines


# The statements both client scenarios run, and what each must return.
CLIENT_QUERIES = ("select count(*) from range(12345)", "select sum(id) from range(1000)", sleep_sql(8000))


def check_client_queries(out: list[dict]) -> None:
    check(out[0].get("first") == [12345] and not out[0].get("error"), f"count through scg: {out[0]}")
    check(out[1].get("first") == [499500], f"sum through scg: {out[1]}")
    check(not out[2].get("error") and out[2].get("first", [None, None])[1] == 42,
          f"an 8 s query (past the 3 s stream duration) completes: {out[2]}")


def go_client(url: str, *queries: str, timeout: float = 120) -> list[dict]:
    return client_lines("goclient", [str(lab.LAB / "goclient"), "-remote", url, *queries], timeout)


@scenario
def go_client_queries():
    """spark-connect-go through scg: queries one after another under
    max_executions 1, and one that runs past the server's stream duration
    (the Go client asks for a non-reattachable execution, which the server
    does not cut)."""
    token, backends = servers("spark43a", "spark43b")
    # One execution at a time: a finished non-reattachable execution must give its slot back.
    scg = lab.Scg(lab.base_config(backends, token, limits={"per_tenant": {"max_executions": 1}}), lab.workdir("go"))
    check_client_queries(go_client(f"sc://127.0.0.1:{scg.grpc}", *CLIENT_QUERIES))
    check(scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute"}) == 0,
          "without reattaching: the server never cut its stream")


def jvm_client(url: str, *queries: str, timeout: float = 180, jvm_opts: tuple = ()) -> list[dict]:
    """Runs tests/realspark/jvmclient (Spark's own JVM client, built by
    scripts/setup.sh against the Spark 4.3 distribution's jars) on `queries`."""
    jvm = lab.LAB / "jvmclient"
    cp = f"{jvm / 'classes'}:{(jvm / 'classpath').read_text().strip()}"
    # Arrow reads direct buffers by reflection: the module options Spark's own launcher passes.
    opens = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
             "-Dio.netty.tryReflectionSetAccessible=true"]
    return client_lines("jvmclient", ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", *opens,
                                      *jvm_opts, "-cp", cp, "JvmClient", url, *queries], timeout)


@scenario
def jvm_client_queries():
    """Spark's JVM client (spark-connect-client-jvm 4.3) through scg: queries
    one after another in one session under max_executions 1, one that runs
    past the server's 3 s stream duration (the JVM client executes
    reattachably: it reattaches and releases, and scg lets both through
    without a second slot), and a result of several Arrow batches."""
    token, backends = servers("spark43a", "spark43b")
    scg = lab.Scg(lab.base_config(backends, token, limits={"per_tenant": {"max_executions": 1}}), lab.workdir("jvm"))
    out = jvm_client(scg.url(), *CLIENT_QUERIES, "select id, repeat('x', 100) as pad from range(200000)")
    check_client_queries(out)
    check(out[3].get("rows") == 200000 and not out[3].get("error"), f"200000 rows of ~100 bytes: {out[3]}")
    reattaches = scg.metric("scg_forward_rpcs_total", {"rpc": "ReattachExecute"})
    check(reattaches >= 1, f"the JVM client reattached to the cut stream ({reattaches:.0f} ReattachExecute)")
    check(scg.metric("scg_forward_rpcs_total", {"rpc": "ReleaseExecute"}) >= 1, "and released what it read")
    check(scg.metric("scg_executions_refused_total") == 0, "no continuation took or was refused a second slot")
    check(scg.metric("scg_router_sessions_released_total") == 1 and not sessions_listing(scg),
          "its one session was bound until the client closed it (ReleaseSession), then forgotten")


@scenario
def load_polling():
    """scg polls the real Spark UI REST API: utilization rises with running
    tasks and falls back when they end; a UI address where nothing listens is
    reported clearly."""
    token, backends = servers("spark43b")
    cfg = lab.base_config(backends, token, placement={"strategy": "least_loaded", "poll_interval_ms": 300,
                                                      "ewma_alpha": 1.0})
    import socket
    held = socket.socket()  # bound, never listening: nothing can listen on its port while the scenario runs
    held.bind(("127.0.0.1", 0))
    cfg["backends"].append({"name": "moved-ui", "address": f"127.0.0.1:{backends[0]['grpc']}",
                            "ui_url": f"http://127.0.0.1:{held.getsockname()[1]}"})
    scg = lab.Scg(cfg, lab.workdir("load"))
    s = connect(scg.url())

    def util():
        return {b["name"]: b for b in scg.get("/api/v1/backends")["backends"]}
    lab.wait_for("an idle reading", lambda: util()["spark43b"].get("utilization") is not None, 10)
    idle = util()["spark43b"]["utilization"]
    t = threading.Thread(target=lambda: s.sql(
        "select reflect('java.lang.Thread','sleep', cast(6000 as bigint)) from range(0, 2, 1, 2)").collect())
    t.start()
    busy = lab.wait_for("utilization to rise with 2 running tasks",
                        lambda: (u := util()["spark43b"]["utilization"]) > 0.5 and u, 8)
    t.join(30)
    after = lab.wait_for("utilization to fall after the tasks", lambda: (u := util()["spark43b"]["utilization"]) < 0.2
                         and str(u), 10)
    check(True, f"utilization idle {idle} -> busy {busy} -> after {after}")
    moved = util()["moved-ui"]
    err = moved.get("load_error", "")
    check("moved-ui" not in err and ("connect" in err.lower() or "refused" in err.lower()),
          f"a UI port where nothing listens is reported: {err!r}")
    s.stop()


@scenario
def executors_to_zero():
    """A Spark Connect server on a standalone cluster (a master and a worker on
    loopback) with dynamic allocation down to zero executors: scg reads
    utilization 0 while it is idle with no executor, 1 while tasks wait for an
    executor to start, and the query completes once one has; idle again, the
    executor goes and the reading falls back to 0."""
    work = lab.workdir("zero")
    cluster = lab.start_standalone("4.3", work)
    conf = {"spark.dynamicAllocation.enabled": "true",
            "spark.dynamicAllocation.shuffleTracking.enabled": "true",
            "spark.dynamicAllocation.minExecutors": "0", "spark.dynamicAllocation.initialExecutors": "0",
            "spark.dynamicAllocation.maxExecutors": "1",
            "spark.dynamicAllocation.executorIdleTimeout": "3s",
            # Tasks wait this long before an executor is asked for: the window scg must read as saturated.
            "spark.dynamicAllocation.schedulerBacklogTimeout": "6s",
            "spark.executor.memory": "512m", "spark.executor.cores": "2", "spark.cores.max": "2",
            "spark.executor.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"}
    server = lab.start_spark("spark43zero", "4.3", work, None, conf=conf, master=cluster["url"])
    lab.wait_spark_ready(server, timeout=180)
    scg = lab.Scg(lab.base_config([server], None, placement={"strategy": "least_loaded", "poll_interval_ms": 300,
                                                             "ewma_alpha": 1.0}), work)

    def executors() -> int:
        apps = lab.ui_json(server, "/api/v1/applications")
        listed = lab.ui_json(server, f"/api/v1/applications/{apps[0]['id']}/executors")
        return sum(1 for e in listed if e["id"] != "driver" and e.get("isActive", True))

    def util():
        return scg.get("/api/v1/backends")["backends"][0].get("utilization")

    lab.wait_for("no executor and an idle reading", lambda: executors() == 0 and util() == 0.0, 30)
    check(True, "no executor, nothing running: utilization 0")
    s = connect(scg.url())
    result: dict = {}

    def run():
        try:
            result["rows"] = s.sql(sleep_sql(3000) + " from range(0, 2, 1, 2)").collect()
        except Exception as e:  # noqa: BLE001
            result["error"] = error_text(e)
    t = threading.Thread(target=run)
    t.start()
    # Until an executor registers, the tasks wait: scg must read that as saturated.
    saturated, deadline = False, time.monotonic() + 30
    while not saturated and time.monotonic() < deadline and t.is_alive():
        n, u = executors(), util()
        if n > 0:
            break
        saturated = u == 1.0
        time.sleep(0.1)
    check(saturated, "tasks waiting, no executor yet: utilization 1 (saturated, not idle)")
    lab.wait_for("an executor to start", lambda: executors() == 1, 60)
    t.join(90)
    check(not t.is_alive() and len(result.get("rows", [])) == 2, f"the query completed on the new executor: {result}")
    lab.wait_for("the idle executor to go, and the reading with it", lambda: executors() == 0 and util() == 0.0, 40)
    check(True, "idle again, scaled back to zero executors: utilization 0")
    s.stop()


@scenario
def compat():
    """This client against every shared server (Spark 4.3 and 4.0) through
    scg: SQL, a temp view, range, a reattached query."""
    token, backends = servers("spark43a", "spark40")
    results = {}
    for b in backends:
        scg = lab.Scg(lab.base_config([b], token), lab.workdir(f"compat-{b['name']}"))
        try:
            s = connect(scg.url())
            s.sql("create or replace temp view cv as select 5 as n")
            ok = (s.sql("select n from cv").collect()[0].n == 5 and s.range(1000).count() == 1000 and
                  s.sql(sleep_sql(5000)).collect()[0].answer == 42)
            results[b["version"]] = "ok" if ok else "wrong result"
            s.stop()
        except Exception as e:  # noqa: BLE001
            results[b["version"]] = error_text(e)[:200]
        scg.kill()
    print(f"client {CLIENT}: {results}")
    check(all(v == "ok" for v in results.values()), f"client {CLIENT} works with every server through scg")


@scenario
def forgotten_binding():
    """A session scg forgot while Spark still holds it (every replica
    restarted; scg's idle ttl shorter than Spark's): its next call reaches
    the server that holds it, found without creating sessions elsewhere."""
    token, backends = servers("spark43a", "spark43b")
    work = lab.workdir("forgot")
    cfg = lab.base_config(backends, token, placement={"strategy": "round_robin"})
    scg = lab.Scg(cfg, work)
    first = None
    for _ in range(4):
        c = connect(scg.url())
        c.sql("create or replace temp view kept as select 'mine' as w")
        if {r["session_id"]: r["backend"] for r in sessions_listing(scg)}.get(c.client._session_id) == "spark43a":
            first = c
            break
    check(first is not None, "a session on spark43a with a temp view")
    scg.config["bind_addr"] = f"127.0.0.1:{scg.grpc}"  # the client dials the same address again
    scg.kill()
    scg.start()  # a new process: it knows no binding
    # A new session first: round robin would now place the next one on spark43b.
    fresh = connect(scg.url())
    check(fresh.range(1).count() == 1, "a new session after the restart")
    check(first.sql("select w from kept").collect()[0].w == "mine",
          "the forgotten session reached spark43a, which holds its view")
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    check(rows.get(first.client._session_id) == "spark43a", "and is bound there again")
    check(scg.metric("scg_router_sessions_found_total") == 1, "scg_router_sessions_found_total is 1")


@scenario
def retries():
    """What this client does with scg's "retry later" answers: a rate limit
    refused as RESOURCE_EXHAUSTED + RetryInfo (default), and as UNAVAILABLE +
    RetryInfo (limits.retry_status: unavailable); spark-connect-go too."""
    token, backends = servers("spark43a")
    honours_retry_info = tuple(int(x) for x in CLIENT.split(".")[:2]) >= (4, 1)
    for status in ("resource_exhausted", "unavailable"):
        cfg = lab.base_config(backends, token, rate_limits={"per_user": {"rps": 0.5, "burst": 1}},
                              limits={"retry_status": status})
        scg = lab.Scg(cfg, lab.workdir(f"retry-{status}"))
        s = connect(scg.url())
        s.range(2).count()  # takes the burst (PySpark 4.3's connect takes it first: then this waits)
        if honours_retry_info:
            # That query may have run for longer than a token takes to come
            # back (a cold server: 2 s): a fast call takes what came back, so
            # the next one finds none left.
            s.conf.get("spark.sql.session.timeZone")
        t0 = time.monotonic()
        try:
            s.range(3).count()
            outcome = "retried and succeeded"
        except Exception as e:  # noqa: BLE001
            outcome = "gave up: " + error_text(e)[:100]
        secs = time.monotonic() - t0
        print(f"  client {CLIENT}, retry_status {status}: {outcome} after {secs:.1f} s")
        retried = outcome.startswith("retried")
        if status == "unavailable" or honours_retry_info:
            check(retried and secs >= 1.0, f"{status}: the client waited ({secs:.1f} s) and retried")
        else:
            check(not retried and secs < 1.0 and "rate limit" in outcome,
                  f"{status}: PySpark {CLIENT} does not retry it, it fails at once naming the limit")
        s.stop()
        # spark-connect-go: one session, two statements; the second is rate limited.
        scg.kill()
        scg = lab.Scg(cfg, lab.workdir(f"retry-go-{status}"))
        out = go_client(f"sc://127.0.0.1:{scg.grpc}", "select 1", "select 2")
        go_outcome = "gave up" if any(o.get("error") for o in out) else "succeeded"
        print(f"  spark-connect-go, retry_status {status}: {go_outcome} {[o.get('error', '')[:80] for o in out]}")
        check(go_outcome == "gave up", f"{status}: spark-connect-go (no retry by default) gives up")
        scg.kill()
        if not CLIENT.startswith("4.3"):
            continue  # the JVM client is the 4.3 distribution's, whatever the Python client
        scg = lab.Scg(cfg, lab.workdir(f"retry-jvm-{status}"))
        out = jvm_client(scg.url(), "select 1", "select 2")
        jvm_errors = [o.get("error", "") for o in out if o.get("error")]
        print(f"  spark-connect-client-jvm 4.3, retry_status {status}: "
              f"{'gave up ' + jvm_errors[0][:100] if jvm_errors else 'retried and succeeded'} "
              f"after {out[-1]['secs']:.1f} s")
        check(not jvm_errors and out[-1]["secs"] >= 1.0,
              f"{status}: the JVM client 4.3 waits ({out[-1]['secs']:.1f} s) and retries")
        scg.kill()


# --- the README's demo ----------------------------------------------------------------------


def processes_with(text: str) -> list[int]:
    """Pids of the processes whose command line contains `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def processes_of_session(sid: int) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[3]) == sid:
                    found.append(int(proc.name))
            except (OSError, IndexError, ValueError):
                pass
    return found


@scenario
def demo_spark():
    """`bash scripts/demo.sh --spark` as a user runs it, without a terminal:
    it exits 0 after the walkthrough, each of its four sessions stayed on one
    server and kept its view and conf, the sessions used both servers, their
    long queries were reattached, and no process it started is left."""
    env = dict(os.environ, SCG_DEMO_PORT="0", SCG_DEMO_ADMIN_PORT="0")  # any free ports
    env.pop("SCG_BUILD_DIR", None)  # the script builds and runs build/, as a user's would
    p = subprocess.Popen(["bash", "scripts/demo.sh", "--spark"], cwd=lab.ROOT, env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=480)
    except subprocess.TimeoutExpired:
        lab.kill_tree(p.pid)
        out, _ = p.communicate()
        raise AssertionError(f"demo.sh --spark did not exit within 480 s without a terminal:\n{out[-3000:]}")
    finally:
        left_in_session = processes_of_session(p.pid)
        lab.kill_tree(p.pid)
    walkthrough = out[out.find("Starting two Spark"):]
    print("\n".join("  | " + line for line in walkthrough.splitlines()
                    if not line.strip().startswith(('"', "{", "}", "[", "]"))))  # the JSON listing aside
    check(p.returncode == 0, f"demo.sh --spark exited {p.returncode} ({out[-1500:] if p.returncode else 'ok'})")
    held = {}
    for i in range(4):
        m = re.search(rf"^  session {i}: stayed on (spark-[ab]), its view says {i}, conf {10 + i}, long query done$",
                      out, re.M)
        check(m, f"session {i} stayed on one server, with its own view and conf, and its long query done")
        held[i] = m.group(1)
    check(set(held.values()) == {"spark-a", "spark-b"}, f"the sessions used both servers ({held})")
    m = re.search(r"^ReattachExecute calls scg forwarded: (\d+)$", out, re.M)
    check(m and int(m.group(1)) >= 4, f"each long query was reattached through scg ({m and m.group(1)} calls)")
    m = re.search(r"^Logs in (/\S+)\.$", out, re.M)
    check(m, "the demo names its working directory")
    work = m.group(1)
    check(not left_in_session, f"no process of the script's session outlived it ({left_in_session})")
    left = processes_with(work)
    for pid in left:
        lab.kill_tree(pid)
    check(not left, f"no process started from {work} is left ({left})")


def main():
    global SERVER
    args = sys.argv[1:]
    if args == ["--list"]:
        print("\n".join(SCENARIOS))
        return
    if len(args) == 3 and args[1] == "--server":
        if args[0] not in ON_ANY_SERVER:
            sys.exit(f"{args[0]} does not take --server; these do: {' '.join(sorted(ON_ANY_SERVER))}")
        SERVER = args[2]
    elif len(args) != 1 or args[0] not in SCENARIOS:
        sys.exit("usage: scenarios.py NAME [--server SERVER] | --list")
    fn = SCENARIOS[args[0]]
    on = f", server {SERVER}" if fn.__name__ in ON_ANY_SERVER else ""
    print(f"{fn.__name__} (PySpark client {CLIENT}{on}): {fn.__doc__.split(chr(10))[0]}")
    t0 = time.monotonic()
    fn()
    print(f"{fn.__name__}: passed in {time.monotonic() - t0:.1f} s")
    lab._reap_children()
    os._exit(0)  # PySpark's release threads must not hold the process


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        print(f"FAILED: {e}")
        lab._reap_children()
        os._exit(1)
