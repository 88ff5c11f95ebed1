"""Real Spark Connect servers and scg replicas on loopback, for the real-Spark tier.

Every process this module starts is recorded by pid and killed at exit (and the
shared servers by `servers.py stop`). Ports come from the kernel: port 0 where
the program takes it (scg), else a free port found by binding and releasing
it, which another process may take before the program binds it; a Spark
server is therefore checked to listen on the ports it was given and started
again on fresh ones when it does not (wait_spark_ready), and so is a
standalone master (start_standalone).

The shared server set (started once per ctest run by `servers.py start`) is
described in build/realspark/servers.json:
  {"token": ..., "servers": [{"name", "version", "grpc", "ui", "pid", "home", "log"}]}
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
BUILD = Path(os.environ.get("SCG_BUILD_DIR", ROOT / "build")).resolve()
LAB = BUILD / "realspark"
SERVERS_JSON = LAB / "servers.json"
# The scg binary under test (SCG_BINARY=build-asan/scg runs the tier on the sanitizer build).
SCG_BINARY = Path(os.environ.get("SCG_BINARY", BUILD / "scg")).resolve()

# The Spark versions the tier runs, each from its own virtual environment
# (scripts/setup_realspark.sh creates them with pinned packages).
VENVS = {"4.3": LAB / "py43", "4.0": LAB / "py40"}

# Spark settings of the test servers. The reattachable stream duration is cut
# to a few seconds so that every query longer than that is reattached (the
# production default is 2 minutes).
STREAM_SECS = 3
SERVER_CONF = {
    "spark.connect.execute.reattachable.senderMaxStreamDuration": f"{STREAM_SECS}s",
    "spark.connect.execute.reattachable.senderMaxStreamSize": "8m",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.connect.grpc.binding.address": "127.0.0.1",
    "spark.ui.enabled": "true",
}

_children: list[subprocess.Popen] = []
_groups: list[int] = []


def _reap_children() -> None:
    for pgid in _groups:  # process groups whose members are not our children (a worker's executors)
        kill_tree(pgid)
    for p in _children:
        if p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
    for p in _children:
        with contextlib.suppress(Exception):
            p.wait(timeout=10)


atexit.register(_reap_children)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what: str, pred, timeout: float, interval: float = 0.2):
    """Polls pred() until it returns a truthy value; fails naming `what`. An
    exception from pred() counts as "not yet", except an AssertionError, which
    ends the wait at once (pred saw that the awaited thing will never come)."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - kept for the failure message
            last_exc = e
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}" +
                         (f" (last error: {last_exc})" if last_exc else ""))


def spark_home(version: str) -> Path:
    found = sorted(VENVS[version].glob("lib/python3*/site-packages/pyspark"))
    return found[0] if found else VENVS[version] / "lib" / "python3" / "site-packages" / "pyspark"


def venv_python(version: str) -> str:
    return str(VENVS[version] / "bin" / "python")


# --- Spark Connect servers -----------------------------------------------------------


def listening_ports(pgid: int) -> set[int]:
    """The TCP ports that processes of process group `pgid` listen on (from
    /proc: the group's socket inodes matched against the LISTEN sockets)."""
    inodes = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[2]) != pgid:
                continue
            for fd in (proc / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


class _PortTaken(AssertionError):
    """The server did not get a port it was given (another process had it)."""


SPARK_START_ATTEMPTS = 3


def start_spark(name: str, version: str, workdir: Path, token: str | None,
                conf: dict | None = None, heap: str = "512m", master: str = "local[2]") -> dict:
    """Starts a Spark Connect server in local mode on two free ports (gRPC and
    UI, both passed explicitly); returns its description at once, and
    wait_spark_ready waits until it listens on both. The token goes in through
    the environment (SPARK_CONNECT_AUTHENTICATE_TOKEN), never on the command
    line or in SparkConf (docs/security.md says why)."""
    server = {"name": name, "version": version, "home": str(spark_home(version)),
              "log": str(workdir / f"{name}.log")}
    server["launch"] = lambda: _launch_spark(server, workdir, token, conf, heap, master)
    server["launch"]()
    return server


def _launch_spark(server: dict, workdir: Path, token: str | None, conf: dict | None, heap: str,
                  master: str) -> None:
    name, home = server["name"], Path(server["home"])
    grpc_port, ui_port = free_port(), free_port()
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_LOG_DIR": str(workdir), "SPARK_CONF_DIR": str(workdir / f"{name}-conf"),
                "PYSPARK_PYTHON": venv_python(server["version"])})
    env.pop("SPARK_CONNECT_AUTHENTICATE_TOKEN", None)
    if token:
        env["SPARK_CONNECT_AUTHENTICATE_TOKEN"] = token
    (workdir / f"{name}-conf").mkdir(parents=True, exist_ok=True)
    settings = dict(SERVER_CONF)
    settings.update({"spark.connect.grpc.binding.port": str(grpc_port), "spark.ui.port": str(ui_port),
                     "spark.local.dir": str(workdir / f"{name}-tmp"),
                     "spark.sql.warehouse.dir": str(workdir / f"{name}-warehouse")})
    settings.update(conf or {})
    argv = [str(home / "bin" / "spark-submit"), "--class",
            "org.apache.spark.sql.connect.service.SparkConnectServer", "--master", master,
            "--name", name, "--driver-memory", heap,
            "--driver-java-options", "-XX:+UseSerialGC -Xss4m -XX:TieredStopAtLevel=1"]
    for k, v in settings.items():
        argv += ["--conf", f"{k}={v}"]
    out = open(server["log"], "ab")
    log_from = out.tell()
    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=workdir,
                         start_new_session=True)
    _children.append(p)
    _groups.append(p.pid)  # its Python workers too
    server.update({"grpc": int(settings["spark.connect.grpc.binding.port"]), "ui": int(settings["spark.ui.port"]),
                   "ui_enabled": settings["spark.ui.enabled"] == "true", "pid": p.pid, "popen": p,
                   "log_from": log_from})


def description(server: dict) -> dict:
    """What servers.json keeps of a server (no process handle, no launcher)."""
    return {k: v for k, v in server.items() if k not in ("popen", "launch", "log_from", "ui_enabled")}


def start_standalone(version: str, workdir: Path, cores: int = 2) -> dict:
    """A Spark standalone cluster on loopback: one master and one worker
    (`cores` cores, 1 GiB for executors), daemons on 256 MiB heaps. Returns
    {"url": "spark://127.0.0.1:PORT", "master_ui", "pids"} once the worker has
    registered. A master that did not get its ports (Spark moves to the next
    port when one is taken) is started again on fresh ones."""
    home = spark_home(version)
    env = dict(os.environ)
    env.update({"SPARK_HOME": str(home), "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_DAEMON_MEMORY": "256m",
                "SPARK_LOG_DIR": str(workdir), "SPARK_WORKER_DIR": str(workdir / "worker"),
                "SPARK_CONF_DIR": str(workdir / "standalone-conf")})
    (workdir / "standalone-conf").mkdir(parents=True, exist_ok=True)

    def daemon(name: str, args: list) -> subprocess.Popen:
        out = open(workdir / f"standalone-{name}.log", "ab")
        p = subprocess.Popen([str(home / "bin" / "spark-class"), *args], stdout=out, stderr=subprocess.STDOUT,
                             env=env, cwd=workdir, start_new_session=True)
        _children.append(p)
        _groups.append(p.pid)
        return p

    for attempt in range(1, SPARK_START_ATTEMPTS + 1):
        port, master_ui = free_port(), free_port()
        log = workdir / "standalone-master.log"
        log_from = log.stat().st_size if log.exists() else 0
        master = daemon("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(master_ui)])

        def listening():
            if master.poll() is not None:
                raise _PortTaken(f"exited with {master.returncode}")
            with open(log, "rb") as f:
                f.seek(log_from)
                if b"could not bind on port" in f.read():
                    raise _PortTaken("moved off a port it was given")
            return {port, master_ui} <= listening_ports(master.pid)
        try:
            wait_for(f"the standalone master on :{port} (UI :{master_ui})", listening, 60, 0.3)
            break
        except _PortTaken as e:
            kill_tree(master.pid)
            if attempt == SPARK_START_ATTEMPTS:
                raise AssertionError(f"the standalone master {e}, {attempt} times; log: {log}") from None
    url = f"spark://127.0.0.1:{port}"
    worker = daemon("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port", "0",
                               "--cores", str(cores), "--memory", "1g", url])

    def registered():
        with urllib.request.urlopen(f"http://127.0.0.1:{master_ui}/json/", timeout=3) as r:
            return len(json.loads(r.read()).get("workers", [])) >= 1
    wait_for("the standalone worker to register", lambda: _quiet(registered), 60, 0.5)
    return {"url": url, "master_ui": master_ui, "pids": [master.pid, worker.pid]}


def _quiet(pred):
    try:
        return pred()
    except Exception:  # noqa: BLE001
        return False


def wait_spark_ready(server: dict, timeout: float = 120) -> None:
    """Waits until the server's own process listens on the gRPC port and the
    UI port it was given. Spark moves its UI to the next free port without
    failing when the port is taken (and the gRPC port may be bound by someone
    else), so a port that answers is not enough: the listening sockets must be
    the server's. A server that lost a port is restarted on fresh ports, at
    most SPARK_START_ATTEMPTS times in all."""
    for attempt in range(1, SPARK_START_ATTEMPTS + 1):
        def ready():
            p = server["popen"]
            with open(server["log"], "rb") as f:
                f.seek(server["log_from"])
                log = f.read().decode(errors="replace")
            bind_failed = "Address already in use" in log or "BindException" in log
            if p.poll() is not None:
                if bind_failed:
                    raise _PortTaken(f"exited with {p.returncode}: a port was taken")
                raise AssertionError(f"Spark server {server['name']} exited with {p.returncode}; "
                                     f"log: {server['log']}\n{tail(server['log'])}")
            mine = listening_ports(server["pid"])
            if server["grpc"] not in mine:
                if bind_failed:
                    raise _PortTaken(f"could not bind :{server['grpc']}")
                return False
            # The UI binds before the Connect service starts: by now it listens, or moved.
            if server["ui_enabled"] and server["ui"] not in mine:
                raise _PortTaken(f"has no UI on :{server['ui']} (it listens on {sorted(mine)})")
            return True
        try:
            wait_for(f"Spark server {server['name']} on :{server['grpc']} (UI :{server['ui']})", ready, timeout, 0.5)
            return
        except _PortTaken as e:
            if attempt == SPARK_START_ATTEMPTS:
                raise AssertionError(f"Spark server {server['name']}: {e}, {attempt} times") from None
            print(f"  Spark server {server['name']} {e}; starting it again on fresh ports", flush=True)
            kill_tree(server["pid"])
            with contextlib.suppress(subprocess.TimeoutExpired):
                server["popen"].wait(timeout=10)
            server["launch"]()


def tail(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def shared_servers() -> dict:
    """The server set `servers.py start` left running for this ctest run."""
    if not SERVERS_JSON.exists():
        raise AssertionError(f"{SERVERS_JSON} is missing: the realspark_servers_start fixture did not run")
    lab = json.loads(SERVERS_JSON.read_text())
    for s in lab["servers"]:
        if not pid_alive(s["pid"]):
            raise AssertionError(f"shared Spark server {s['name']} (pid {s['pid']}) is not running")
    return lab


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def kill_tree(pid: int, sig=signal.SIGKILL) -> None:
    """Signals a process group started with start_new_session (spark-submit
    execs java, which keeps the group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def warn_error_lines(log_path: str, since_offset: int = 0) -> list[str]:
    """WARN/ERROR lines of a Spark log from byte offset `since_offset`."""
    with open(log_path, "rb") as f:
        f.seek(since_offset)
        text = f.read().decode(errors="replace")
    return [l for l in text.splitlines() if " WARN " in l or " ERROR " in l]


def log_size(path: str) -> int:
    return os.path.getsize(path)


def ui_json(server: dict, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{server['ui']}{path}", timeout=5) as r:
        return json.loads(r.read())


# --- scg --------------------------------------------------------------------------------


class Scg:
    """One scg replica started from a config dict (written as JSON, which is YAML)."""

    def __init__(self, config: dict, workdir: Path, name: str = "scg", env: dict | None = None):
        self.name = name
        self.dir = workdir
        self.config = config
        self.cfg_path = workdir / f"{name}.yaml"
        self.port_file = workdir / f"{name}.ports"
        self.log = workdir / f"{name}.log"
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        self.cfg_path.write_text(json.dumps(self.config, indent=1))
        with contextlib.suppress(FileNotFoundError):
            self.port_file.unlink()
        env = dict(os.environ)
        env.update(self.env or {})
        out = open(self.log, "ab")
        self.proc = subprocess.Popen([str(SCG_BINARY), "--config", str(self.cfg_path),
                                      "--port-file", str(self.port_file)],
                                     stdout=out, stderr=subprocess.STDOUT, env=env)
        _children.append(self.proc)

        def ports():
            if self.proc.poll() is not None:
                raise AssertionError(f"scg {self.name} exited with {self.proc.returncode}:\n{tail(str(self.log))}")
            if self.port_file.exists() and self.port_file.stat().st_size > 0:
                return json.loads(self.port_file.read_text())
            return None
        self.ports = wait_for(f"scg {self.name} port file", ports, 20, 0.05)
        self.grpc = self.ports["grpc"]
        self.admin = self.ports.get("admin")

    def url(self, extra: str = "") -> str:
        return f"sc://127.0.0.1:{self.grpc}/" + (f";{extra}" if extra else "")

    def get(self, path: str, timeout: float = 5):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin}{path}", timeout=timeout) as r:
            body = r.read()
        return json.loads(body) if path.startswith("/api") else body.decode()

    def post(self, path: str):
        req = urllib.request.Request(f"http://127.0.0.1:{self.admin}{path}", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status

    def metric(self, name: str, labels: dict | None = None, exclude: dict | None = None) -> float:
        """Sum of the samples of metric `name` whose labels include `labels` and
        none of `exclude`, from one scrape (two scrapes would race calls that end
        between them, such as PySpark's background ReleaseExecute)."""
        total = 0.0
        for line in self.get("/metrics").splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, lab = head.partition("{")
            if metric != name:
                continue
            if labels and not all(f'{k}="{v}"' in lab for k, v in labels.items()):
                continue
            if exclude and any(f'{k}="{v}"' in lab for k, v in exclude.items()):
                continue
            total += float(value)
        return total

    def ready(self) -> bool:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{self.admin}/readyz", timeout=2)
            return True
        except Exception:  # noqa: BLE001
            return False

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def backend_entry(server: dict, **extra) -> dict:
    e = {"name": server["name"], "address": f"127.0.0.1:{server['grpc']}",
         "ui_url": f"http://127.0.0.1:{server['ui']}"}
    e.update(extra)
    return e


def base_config(servers: list[dict], token: str | None, **overrides) -> dict:
    cfg = {
        "bind_addr": "127.0.0.1:0",
        "admin_addr": "127.0.0.1:0",
        "backends": [backend_entry(s) for s in servers],
        "placement": {"strategy": "least_loaded", "poll_interval_ms": 500},
        "health": {"interval_ms": 500, "timeout_ms": 1000, "failures": 3, "successes": 1},
        "logging": {"level": "info"},
        # the admin plane open on loopback: these scenarios test the data plane
        "admin": {"allow_unauthenticated": True},
    }
    if token:
        cfg["backend_token"] = {"kind": "inline", "value": token}
    cfg.update(overrides)
    return cfg


def workdir(name: str) -> Path:
    d = Path(tempfile.mkdtemp(prefix=f"scg-rs-{name}-", dir="/tmp"))
    return d
