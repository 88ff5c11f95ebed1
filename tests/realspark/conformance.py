"""The emulator against real Spark: one scripted sequence of Spark Connect calls
(sessions, operations, reattach, release, clone, bad ids, ...) sent to
scg-fake-spark and to a real Spark Connect server of the shared set, and
compared step by step: gRPC code, error class, SQL state, ErrorInfo reason and
message shape, and whether a result stream ended with result_complete.

  python conformance.py SERVER      SERVER: a name in servers.json (spark43a, spark40)
  python conformance.py --fake-only prints the emulator's answers (no Spark needed)
  python conformance.py --spark-only SERVER   prints the server's answers

Any difference fails the test and is printed as a table, so the emulator and
Spark cannot drift apart unnoticed. Run with the Python of the real-Spark tier
(pyspark's generated protos build the requests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")

import grpc  # noqa: E402
from google.rpc import error_details_pb2, status_pb2  # noqa: E402
from pyspark.sql.connect.proto import base_pb2 as pb  # noqa: E402

import sparklab as lab  # noqa: E402

USER = "conformance"
# A query that runs about 3 s on Spark; the emulator's knobs make its stream
# last as long (Spark ignores the x-fake-* headers).
SLOW_SQL = "select reflect('java.lang.Thread', 'sleep', cast(3000 as bigint)) as slept"
SLOW_KNOBS = (("x-fake-responses", "10"), ("x-fake-delay-ms", "300"))

# The emulator follows Spark 4.3. Where Spark 4.0 answers otherwise, the 4.0
# answer is listed here and must be exactly that (SQL states are compared
# without the listed ones: 4.0 gives every INVALID_HANDLE error HY000).
SPARK_40 = {
    "ExecutePlan reusing a released operation id": {"code": "OK", "result_complete": True},
    "CloneSession of a missing parent": {"code": "UNIMPLEMENTED"},  # CloneSession came in 4.1
    "CloneSession onto an existing session": {"code": "UNIMPLEMENTED"},
    "CloneSession to a new session id that is not a UUID": {"code": "UNIMPLEMENTED"},
}


class Target:
    """One server under test: a channel, its token and what it answered."""

    def __init__(self, name: str, port: int, token: str):
        self.name = name
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.token = token

    def md(self, extra=()) -> list:
        return [("authorization", f"Bearer {self.token}"), *extra]

    def unary(self, method: str, request, response_type, extra_md=()):
        call = self.channel.unary_unary(f"/spark.connect.SparkConnectService/{method}",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_type.FromString)
        return call(request, timeout=30, metadata=self.md(extra_md))

    def stream(self, method: str, request, extra_md=()):
        call = self.channel.unary_stream(f"/spark.connect.SparkConnectService/{method}",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=pb.ExecutePlanResponse.FromString)
        return call(request, timeout=60, metadata=self.md(extra_md))


def outcome(fn) -> dict:
    """Runs one call; returns what is compared: code, error class, SQL state,
    ErrorInfo reason, message shape and (for streams) result_complete."""
    try:
        value = fn()
        out = {"code": "OK"}
        if isinstance(value, dict):
            out.update(value)
        return out
    except grpc.RpcError as e:
        return describe_error(e)


def describe_error(e: grpc.RpcError) -> dict:
    out = {"code": e.code().name}
    message = e.details() or ""
    for key, value in e.trailing_metadata() or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                out["class"] = info.metadata.get("errorClass", "")
                out["sqlState"] = info.metadata.get("sqlState", "")
                out["reason"] = info.reason
                out["domain"] = info.domain
    # Spark's message is "[CLASS] text ..."; compare only that it starts so.
    if out.get("class"):
        out["message"] = "[class] ..." if message.startswith(f"[{out['class']}]") else message[:80]
    return out


def read_stream(responses) -> dict:
    complete = False
    for r in responses:
        complete = complete or r.HasField("result_complete")
    return {"result_complete": complete}


def read_to_the_end(t: "Target", session: str, op: str, responses) -> dict:
    """Reads a reattachable execution as clients do: a stream that ends
    without result_complete (the server cut it) is reattached after the last
    response, up to 20 times."""
    for _ in range(20):
        last = None
        for r in responses:
            if r.HasField("result_complete"):
                return {"result_complete": True}
            last = r.response_id or last
        responses = t.stream("ReattachExecute", reattach(session, op, last=last))
    return {"result_complete": False}


def user() -> pb.UserContext:
    return pb.UserContext(user_id=USER)


def execute(session: str, op: str | None, reattachable: bool, sql: str = "select 1 as one",
            observed: str | None = None) -> pb.ExecutePlanRequest:
    req = pb.ExecutePlanRequest(session_id=session, user_context=user(), client_type="conformance")
    req.plan.root.sql.query = sql
    if op is not None:
        req.operation_id = op
    if reattachable:
        req.request_options.add().reattach_options.reattachable = True
    if observed is not None:
        req.client_observed_server_side_session_id = observed
    return req


def reattach(session: str, op: str, last: str | None = None, observed: str | None = None):
    req = pb.ReattachExecuteRequest(session_id=session, user_context=user(), operation_id=op)
    if last is not None:
        req.last_response_id = last
    if observed is not None:
        req.client_observed_server_side_session_id = observed
    return req


def release(session: str, op: str, observed: str | None = None):
    req = pb.ReleaseExecuteRequest(session_id=session, user_context=user(), operation_id=op)
    req.release_all.SetInParent()
    if observed is not None:
        req.client_observed_server_side_session_id = observed
    return req


def config(session: str, observed: str | None = None):
    req = pb.ConfigRequest(session_id=session, user_context=user())
    req.operation.get_with_default.pairs.add(key="spark.conformance.absent", value="x")
    if observed is not None:
        req.client_observed_server_side_session_id = observed
    return req


def run_sequence(t: Target) -> list[tuple[str, dict]]:
    """The scripted sequence; every step's outcome, in order."""
    steps: list[tuple[str, dict]] = []
    s1, s2, o1, o2, o3, o4, o5 = (str(uuid.uuid4()) for _ in range(7))

    def step(name: str, fn):
        steps.append((name, outcome(fn)))

    def server_side_id(session: str) -> str:
        return t.unary("Config", config(session), pb.ConfigResponse).server_side_session_id

    step("Config creates a session", lambda: t.unary("Config", config(s1), pb.ConfigResponse) and None)
    step("a session id that is not a UUID", lambda: t.unary("Config", config("kill-0"), pb.ConfigResponse))
    step("ExecutePlan with an operation id that is not a UUID",
         lambda: read_stream(t.stream("ExecutePlan", execute(s1, "op-1", True))))
    step("a reattachable execution ends with result_complete",
         lambda: read_to_the_end(t, s1, o1, t.stream("ExecutePlan", execute(s1, o1, True))))
    step("ReattachExecute of a finished, unreleased reattachable execution",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o1))))
    step("ReleaseExecute release_all", lambda: t.unary("ReleaseExecute", release(s1, o1),
                                                       pb.ReleaseExecuteResponse) and None)
    step("ReattachExecute after release_all", lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o1))))
    step("ExecutePlan reusing a released operation id",
         lambda: read_stream(t.stream("ExecutePlan", execute(s1, o1, True))))
    step("a non-reattachable execution has no result_complete",
         lambda: read_stream(t.stream("ExecutePlan", execute(s1, o2, False))))
    step("ReattachExecute of an ended non-reattachable execution",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o2))))

    # A running non-reattachable execution: reattach is refused while it runs.
    running = {}
    runner = threading.Thread(target=lambda: running.update(outcome(
        lambda: read_stream(t.stream("ExecutePlan", execute(s1, o3, False, SLOW_SQL), SLOW_KNOBS)))))
    runner.start()
    time.sleep(1.0)
    step("ReattachExecute of a running non-reattachable execution",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o3))))
    step("ExecutePlan with the id of a running operation",
         lambda: read_stream(t.stream("ExecutePlan", execute(s1, o3, True))))
    runner.join(timeout=60)
    steps.append(("the running non-reattachable execution ends", dict(running)))

    step("another reattachable execution, left unreleased",
         lambda: read_to_the_end(t, s1, o5, t.stream("ExecutePlan", execute(s1, o5, True))))
    step("ReattachExecute with a response id never sent",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o5, last=str(uuid.uuid4())))))
    step("ReattachExecute of an unknown operation",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, str(uuid.uuid4())))))
    step("ReattachExecute with an operation id that is not a UUID",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, "op-survives-kill"))))
    step("ReattachExecute in an unknown session",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s2, o1))))
    step("ReleaseExecute in an unknown session",
         lambda: t.unary("ReleaseExecute", release(s2, o1), pb.ReleaseExecuteResponse) and None)
    step("ReleaseExecute with another observed server-side session id",
         lambda: t.unary("ReleaseExecute", release(s1, o1, observed=str(uuid.uuid4())),
                         pb.ReleaseExecuteResponse) and None)
    step("Config with another observed server-side session id",
         lambda: t.unary("Config", config(s1, observed=str(uuid.uuid4())), pb.ConfigResponse))
    step("Config with the observed server-side session id",
         lambda: t.unary("Config", config(s1, observed=server_side_id(s1)), pb.ConfigResponse) and None)
    step("CloneSession of a missing parent",
         lambda: t.unary("CloneSession", pb.CloneSessionRequest(session_id=s2, user_context=user(),
                                                                new_session_id=str(uuid.uuid4())),
                         pb.CloneSessionResponse) and None)
    step("CloneSession onto an existing session",
         lambda: t.unary("CloneSession", pb.CloneSessionRequest(session_id=s1, user_context=user(),
                                                                new_session_id=s1),
                         pb.CloneSessionResponse) and None)
    step("CloneSession to a new session id that is not a UUID",
         lambda: t.unary("CloneSession", pb.CloneSessionRequest(session_id=s1, user_context=user(),
                                                                new_session_id="clone-1"),
                         pb.CloneSessionResponse) and None)

    # An execution left running when its session is released.
    runner = threading.Thread(target=lambda: running.update(outcome(
        lambda: read_stream(t.stream("ExecutePlan", execute(s1, o4, True, SLOW_SQL), SLOW_KNOBS)))))
    running.clear()
    runner.start()
    time.sleep(1.0)
    step("ReleaseSession", lambda: t.unary("ReleaseSession",
                                           pb.ReleaseSessionRequest(session_id=s1, user_context=user()),
                                           pb.ReleaseSessionResponse) and None)
    runner.join(timeout=60)
    steps.append(("a stream running when its session is released ends",
                  {k: running.get(k, "") for k in ("code", "class")}))
    step("Config in a released session", lambda: t.unary("Config", config(s1), pb.ConfigResponse))
    step("ExecutePlan in a released session",
         lambda: read_stream(t.stream("ExecutePlan", execute(s1, str(uuid.uuid4()), True))))
    step("ReattachExecute in a released session",
         lambda: read_stream(t.stream("ReattachExecute", reattach(s1, o4))))
    step("ReleaseSession of an unknown session",
         lambda: t.unary("ReleaseSession", pb.ReleaseSessionRequest(session_id=str(uuid.uuid4()),
                                                                    user_context=user()),
                         pb.ReleaseSessionResponse) and None)
    return steps


def start_fake(token: str, workdir: Path) -> tuple[subprocess.Popen, int]:
    exe = lab.BUILD / "scg-fake-spark"
    ports = workdir / "fake.ports"
    p = subprocess.Popen([str(exe), "--listen", "127.0.0.1:0", "--name", "conformance",
                          "--port-file", str(ports), "--token", token],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lab._children.append(p)
    lab.wait_for("scg-fake-spark's port file", ports.exists, 20, 0.05)
    return p, json.loads(ports.read_text())["grpc"]


def table(rows: list[tuple[str, dict, dict]]) -> str:
    def cell(o: dict) -> str:
        return " ".join(f"{k}={v}" for k, v in o.items() if v != "")
    width = max(len(r[0]) for r in rows)
    return "\n".join(f"{'!!' if a != b else '  '} {name:<{width}}  spark: {cell(a)}\n"
                     f"   {'':<{width}}  fake:  {cell(b)}" for name, a, b in rows)


def as_spark_40(name: str, fake: dict) -> dict:
    """What Spark 4.0 answers where the emulator answers `fake` as 4.3 does."""
    if name in SPARK_40:
        return SPARK_40[name]
    out = dict(fake)
    if out.get("sqlState") == "08003":
        out["sqlState"] = "HY000"
    return out


def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="conformance-", dir=lab.LAB if lab.LAB.exists() else None))
    if sys.argv[1:] == ["--fake-only"]:
        token = "conformance-token"
        _, port = start_fake(token, workdir)
        for name, o in run_sequence(Target("fake", port, token)):
            print(f"{name}: {o}")
        return 0
    servers = lab.shared_servers()
    server = next(s for s in servers["servers"] if s["name"] == sys.argv[-1])
    if sys.argv[1] == "--spark-only":
        for name, o in run_sequence(Target(server["name"], server["grpc"], servers["token"])):
            print(f"{name}: {o}")
        return 0
    _, fake_port = start_fake(servers["token"], workdir)
    spark = run_sequence(Target(server["name"], server["grpc"], servers["token"]))
    fake = run_sequence(Target("fake", fake_port, servers["token"]))
    rows = [(a[0], a[1], b[1]) for a, b in zip(spark, fake)]
    print(f"Spark {server['version']} ({server['name']}) against scg-fake-spark, step by step:")
    print(table(rows))
    if server["version"] == "4.0":
        rows = [(name, a, as_spark_40(name, b)) for name, a, b in rows]
        print(f"\nwith Spark 4.0's known answers for {len(SPARK_40)} steps and its HY000 session states")
    differ = [r[0] for r in rows if r[1] != r[2]]
    if differ:
        print(f"\n{len(differ)} of {len(rows)} steps differ: " + "; ".join(differ))
        return 1
    print(f"\nall {len(rows)} steps agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
