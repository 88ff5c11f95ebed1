"""Scenarios of the real-Spark tier: real Spark Connect servers, real PySpark (and
spark-connect-go) clients, scg in front. One ctest test per scenario:

  python scenarios.py NAME        runs one scenario (exit 0: every assertion held)
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


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


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


# --- affinity and results ---------------------------------------------------------------


@scenario
def affinity():
    """Temp views and SQL conf stay with their session across many calls, with
    sessions spread over two servers."""
    token, backends = servers("spark43a", "spark43b")
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
    for s in spark:
        s.stop()


@scenario
def big_result():
    """toPandas() of about 60 MB: the server cuts the stream every 8 MB
    (senderMaxStreamSize), the client reattaches and releases through scg."""
    token, backends = servers("spark43a", "spark43b")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("big"))
    s = connect(scg.url())
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
    bad = scg.metric("scg_forward_rpcs_total", exclude={"code": "OK"})
    check(bad == 0, f"no call through scg failed ({bad:.0f})")
    s.stop()


@scenario
def long_query():
    """A query that runs past the server's stream duration (3 s here, 2 min by
    default) is continued by reattaches and returns its row once."""
    token, backends = servers("spark43a")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("long"))
    s = connect(scg.url())
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
    server; a 6 s query of a tenant allowed 20 s completes."""
    token, backends = servers("spark43a")
    limits = {"short": {"max_execution_secs": 5}, "long": {"max_execution_secs": 20}}
    scg = lab.Scg(tenant_config(backends, token, limits), lab.workdir("limit"))
    ok = connect(scg.url("x-scg-tenant=long"))
    check(ok.sql(sleep_sql(6000)).collect()[0].answer == 42, "a 6 s query within a 20 s limit completes")
    s = connect(scg.url("x-scg-tenant=short"))
    t0 = time.monotonic()
    try:
        s.sql(sleep_sql(12000)).collect()
        raise AssertionError(f"a 12 s query of a tenant limited to 5 s completed ({time.monotonic() - t0:.1f} s): "
                             "the limit did not follow the operation across reattaches")
    except Exception as e:  # noqa: BLE001
        secs = time.monotonic() - t0
        msg = error_text(e)
        if isinstance(e, AssertionError):
            raise
        check("max_execution_secs" in msg, f"the client is told why: {msg[:160]}")
        check(secs < 9, f"it ended after {secs:.1f} s (limit 5 s)")
    check(scg.metric("scg_executions_killed_total") == 1, "scg_executions_killed_total is 1")
    ok.stop()
    s.stop()


@scenario
def execution_slot():
    """A tenant with max_executions 1: its running query keeps its slot across
    every reattach; another session of the tenant gets in only after it."""
    token, backends = servers("spark43a")
    scg = lab.Scg(tenant_config(backends, token, {"one": {"max_executions": 1}}), lab.workdir("slot"))
    a = connect(scg.url("x-scg-tenant=one"))
    b = connect(scg.url("x-scg-tenant=one"))
    done = {}

    def run_a():
        try:
            done["a"] = a.sql(sleep_sql(9000)).collect()[0].answer
        except Exception as e:  # noqa: BLE001
            done["a_err"] = error_text(e)
        done["a_end"] = time.monotonic()
    t = threading.Thread(target=run_a)
    t.start()
    time.sleep(1.5)
    got_in = []
    while t.is_alive() and len(got_in) + len(done) < 200:
        try:
            b.sql("select 1 as x").collect()
            got_in.append(time.monotonic())
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.3)
    t.join(30)
    check(done.get("a") == 42, f"the 9 s query completed through its reattaches ({done.get('a_err', 'ok')})")
    early = [g for g in got_in if g < done["a_end"] - 0.5]
    check(not early, f"no other execution of the tenant ran while it did ({len(early)} did)")
    refused = scg.metric("scg_executions_refused_total")
    check(refused >= 1, f"the other session was refused {refused:.0f} times meanwhile")
    a.stop()
    b.stop()


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
    time.sleep(3)
    check(s.sql(sleep_sql(8000)).collect()[0].answer == 42, "the 8 s query completed")
    refused = {r: scg.metric("scg_forward_rpcs_total", {"rpc": r, "code": "RESOURCE_EXHAUSTED"})
               for r in ("ReattachExecute", "ReleaseExecute")}
    check(sum(refused.values()) == 0, f"no continuation was refused: {refused}")
    s.stop()


# --- interrupts, artifacts, clones -------------------------------------------------------------


@scenario
def interrupts():
    """interruptTag() and interruptAll() through scg stop running queries,
    also after the query's stream was reattached."""
    token, backends = servers("spark43a", "spark43b")
    scg = lab.Scg(lab.base_config(backends, token), lab.workdir("intr"))
    s = connect(scg.url())
    for how, delay in (("tag", 1.0), ("all", 1.0), ("tag", 4.5)):
        out = {}

        def run():
            s.addTag("slow")  # tags belong to the thread that runs the query
            t0 = time.monotonic()
            try:
                s.sql(sleep_sql(30000)).collect()
                out["result"] = "completed"
            except Exception as e:  # noqa: BLE001
                out["result"] = error_text(e)
            out["secs"] = time.monotonic() - t0
            s.clearTags()
        t = threading.Thread(target=run)
        t.start()
        time.sleep(delay)
        ids = s.interruptTag("slow") if how == "tag" else s.interruptAll()
        t.join(40)
        check(len(ids) == 1, f"interrupt{how.title()}() after {delay} s named one operation")
        check(out.get("result") != "completed" and out.get("secs", 99) < delay + 5,
              f"the query ended after {out.get('secs', 0):.1f} s: {out.get('result', '')[:90]}")
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
        peer_ports = [lab.free_port() for _ in range(n)]
        self.replicas = []
        for i in range(n):
            cfg = lab.base_config(backends, token, **extra)
            cfg["cluster"] = {"node_name": f"scg-{i}", "bind_addr": f"127.0.0.1:{peer_ports[i]}",
                              "seeds": [f"127.0.0.1:{p}" for j, p in enumerate(peer_ports) if j != i],
                              "heartbeat_interval_ms": 250, "connection_timeout_ms": 1000}
            self.replicas.append(lab.Scg(cfg, self.dir, f"scg-{i}"))
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

    def run():
        try:
            out["rows"] = s.sql(f"select id, reflect('java.lang.Thread', 'sleep', cast(if(id = 0, 9000, 0) as bigint)) "
                                f"as z from range(0, 1000, 1, 2)").collect()
        except Exception as e:  # noqa: BLE001
            out["error"] = error_text(e)
    t = threading.Thread(target=run)
    t.start()
    time.sleep(2)
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


@scenario
def backend_killed():
    """A server killed: new sessions go to the other one, and the session it
    held gets a clear error naming it (on_backend_lost: fail)."""
    token, backends = servers("spark43a")
    work = lab.workdir("bkill")
    victim = lab.start_spark("victim", "4.3", work, token)
    lab.wait_spark_ready(victim)
    cfg = lab.base_config([victim] + backends, token, placement={"strategy": "round_robin"},
                          on_backend_lost={"after_secs": 2, "action": "fail"})
    scg = lab.Scg(cfg, work)
    sessions = [connect(scg.url()) for _ in range(2)]
    for s in sessions:
        s.range(3).count()
    rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
    on_victim = [s for s in sessions if rows.get(s.client._session_id) == "victim"]
    check(len(on_victim) == 1, "one session on each server")
    lab.kill_tree(victim["pid"])
    time.sleep(4)
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
        check("victim" in msg, f"the lost session's error names the server within "
                               f"{time.monotonic() - t0:.1f} s: {msg[:200]}")


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


@scenario
def backend_token():
    """Spark started with a token (through its environment): direct access
    without it is refused, access through scg works, and no Config or SQL path
    hands the token to a client."""
    token, backends = servers("spark43a")
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
    for name, probe in TOKEN_PROBES:
        got = probe(s)
        check(token not in got, f"{name} does not show the token")
    for prefix in ("", "spark.connect.", "spark.connect.authenticate."):
        check(token not in config_get_all(scg.grpc, prefix), f"Config get_all(prefix={prefix!r}) does not show it")
    s.stop()


@scenario
def token_in_sparkconf():
    """A server given the token in SparkConf (--conf) echoes it through
    Config and SQL; scg masks it in Config answers, whatever the prefix, and
    says at start that the server exposes it."""
    token = "conf-token-" + uuid.uuid4().hex
    work = lab.workdir("tokconf")
    srv = lab.start_spark("confsrv", "4.3", work, None, conf={"spark.connect.authenticate.token": token})
    lab.wait_spark_ready(srv)
    scg = lab.Scg(lab.base_config([srv], token), work)
    s = connect(scg.url())
    for prefix in ("", "spark.connect.", "spark.connect.authenticate."):
        check(token not in config_get_all(scg.grpc, prefix), f"Config get_all(prefix={prefix!r}) is masked")
    check(token not in s.conf.get("spark.connect.authenticate.token", "absent"), "conf.get is masked")
    lab.wait_for("scg's warning that the server exposes its token",
                 lambda: "backend_token_exposed" in scg.log_text(), 10)
    check(scg.get("/api/v1/backends")["backends"][0].get("token_exposed") is True, "/api/v1/backends says token_exposed")
    s.stop()
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


@scenario
def usage_accounting():
    """scg's per-tenant usage is what PySpark received and what Spark reported:
    the rows of two collects (the arrow batches' row_count, read by scg as they
    pass) equal the rows PySpark got and Spark's numOutputRows where the server
    sends metrics; the tenant's ExecutePlan calls are its executions; another
    tenant's figures do not move."""
    token, backends = servers("spark43a")
    cfg = lab.base_config(backends, token,
                          tenants={"from": "header", "header": "x-scg-tenant", "on_missing": "reject"})
    scg = lab.Scg(cfg, lab.workdir("usage"))
    s = connect(scg.url("x-scg-tenant=billing"))
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
    if not reported:
        print("  note: Spark sent no numOutputRows metric for the collect; compared with the client only")
    else:
        check(250000 in reported, f"Spark's own numOutputRows says 250000 ({reported})")
    usage = scg.get("/api/v1/usage?window=15m&tenant=billing")["rows"]
    check(len(usage) == 1 and usage[0]["result_rows"] >= 250000 + 1234,
          f"GET /api/v1/usage shows the tenant's rows ({usage[0]['result_rows'] if usage else None})")
    s.stop()
    other.stop()


@scenario
def health_probe_quiet():
    """scg's health probes are valid, authenticated requests: a minute of
    probes every 250 ms makes the driver log nothing at WARN or ERROR."""
    token, backends = servers("spark43b")
    log = backends[0]["log"]
    before = lab.log_size(log)
    cfg = lab.base_config(backends, token, health={"interval_ms": 250, "timeout_ms": 1000, "failures": 3,
                                                   "successes": 1})
    scg = lab.Scg(cfg, lab.workdir("probe"))
    time.sleep(8)
    b = scg.get("/api/v1/backends")["backends"][0]
    check(b["healthy"] is True, "the server is healthy by its probes")
    lines = lab.warn_error_lines(log, before)
    check(not lines, f"the driver logged no WARN/ERROR during ~30 probes ({lines[:2]})")


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
    token, backends = servers("spark43a")
    work = lab.workdir("pause")
    frozen = lab.start_spark("frozen", "4.3", work, token)
    lab.wait_spark_ready(frozen)
    cfg = lab.base_config([frozen] + backends, token, placement={"strategy": "round_robin"},
                          on_backend_lost={"after_secs": 60, "action": "rebind"})
    scg = lab.Scg(cfg, work)
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

    def query():
        try:
            in_flight["rows"] = s.sql(sleep_sql(4000)).collect()
        except Exception as e:  # noqa: BLE001 - reported by the check below
            in_flight["error"] = repr(e)

    runner = threading.Thread(target=query, daemon=True)
    runner.start()
    time.sleep(1.5)  # the query runs on the driver, its stream open through scg
    lab.kill_tree(frozen["pid"], signal.SIGSTOP)
    try:
        time.sleep(5)
        fresh = connect(scg.url())
        check(fresh.range(2).count() == 2, "a new session during the pause works")
        rows = {r["session_id"]: r["backend"] for r in sessions_listing(scg)}
        check(rows[fresh.client._session_id] == "spark43a", "and went to the other server")
        time.sleep(30)
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


@scenario
def tls_token():
    """PySpark's token= turns on TLS: through scg's TLS front door with a
    private CA (GRPC_DEFAULT_SSL_ROOTS_FILE_PATH), checked by scg's static auth."""
    token, backends = servers("spark43a")
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
            "s = S.builder.remote(sys.argv[1]).create(); print(s.range(7).count())")
    env = dict(os.environ, GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=str(work / "ca.pem"))

    def run(url: str, extra_env=None):
        r = subprocess.run([sys.executable, "-c", code, url], env=dict(env, **(extra_env or {})),
                           capture_output=True, text=True, timeout=60)
        return r.returncode, r.stdout.split(), r.stderr
    # A host other than "localhost": token= means TLS (ssl_channel_credentials).
    rc, out, err = run(f"sc://127.0.0.1:{scg.grpc}/;token={client_token}")
    check(rc == 0 and out[:1] == ["7"], f"a query over TLS with token= works ({err[-300:]})")
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
    cfg["backends"].append({"name": "moved-ui", "address": f"127.0.0.1:{backends[0]['grpc']}",
                            "ui_url": f"http://127.0.0.1:{lab.free_port()}"})
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


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scenarios.py NAME | --list")
    if sys.argv[1] == "--list":
        print("\n".join(SCENARIOS))
        return
    fn = SCENARIOS[sys.argv[1]]
    print(f"{fn.__name__} (PySpark client {CLIENT}): {fn.__doc__.split(chr(10))[0]}")
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
