#!/usr/bin/env python3
"""Checks the deployment files under deploy/ and the Dockerfile.

    python3 tests/deploy/check_manifests.py PATH/TO/scg     (ctest: deploy_manifests)

- deploy/k8s/ is exactly what deploy/render.py renders from the chart's values;
- every YAML document parses; names line up (Service selectors and the PDB
  select the StatefulSet's pods, Service target ports and probe ports are
  container ports, container ports are the config's ports, the peer seed is
  the headless Service);
- the NetworkPolicy selects the scg pods and opens the cluster port to them only;
- terminationGracePeriodSeconds covers the preStop sleep and the drain deadline;
- the ConfigMap's config, after the entrypoint's substitution (run for real),
  passes `scg --check-config`; so does a variant with cluster TLS, and the
  systemd example config;
- with backendDiscovery enabled (render.py run into a temp dir), the Role grants
  exactly get/list/watch on endpointslices, the RoleBinding binds it to the
  ServiceAccount the pods run as, the token is mounted, and the config carries
  backend_discovery and passes `scg --check-config`; disabled, none of it renders;
- the Helm templates hold the same kinds, read only values that exist and
  parse as YAML once their {{ }} actions are blanked out; tests/deploy/helmlite
  (Go and Sprig, installed by scripts/setup.sh) renders them for real and the objects
  equal render.py's, for the default values and two variants;
- the Dockerfile's runtime packages exist (apt-cache) and cover every shared
  library the scg binary needs (dpkg -S), when those tools are present.
"""
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile
import traceback

try:
    import yaml
except ImportError:
    sys.exit("check_manifests.py needs PyYAML: apt-get install python3-yaml (scripts/setup.sh installs it)")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
CHART = os.path.join(DEPLOY, "helm", "scg")
ENTRYPOINT = os.path.join(DEPLOY, "docker", "entrypoint.sh")
HELMLITE = os.path.join(ROOT, "tests", "deploy", "helmlite")
SPRIG = "/usr/share/gocode/src/github.com/Masterminds/sprig"
sys.path.insert(0, DEPLOY)
import render  # noqa: E402  deploy/render.py

SCG = None  # path of the scg binary, from argv


# --- helpers

def load_docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def load_dir(path):
    """kind/name -> object for every document under path."""
    objs = {}
    for name in sorted(os.listdir(path)):
        if name.endswith(".yaml"):
            for d in load_docs(os.path.join(path, name)):
                objs[f"{d['kind']}/{d['metadata']['name']}"] = d
    return objs


def only(objs, kind):
    found = [o for o in objs.values() if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def selects(selector, labels):
    """A matchLabels-style selector selects a pod with these labels (and is not empty)."""
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def port_of(addr):
    return int(addr.rsplit(":", 1)[1])


def container_port(container, ref):
    """The number a Service targetPort / probe port (a name or a number) refers to."""
    for p in container["ports"]:
        if ref in (p["name"], p["containerPort"]):
            return p["containerPort"]
    raise AssertionError(f"port {ref!r} is not a port of container {container['name']}")


def config_template(objs):
    sts = only(objs, "StatefulSet")
    cm_name = next(v["configMap"]["name"] for v in sts["spec"]["template"]["spec"]["volumes"] if "configMap" in v)
    return objs[f"ConfigMap/{cm_name}"]["data"]["scg.yaml"]


def run_entrypoint(template_text, tmp, env_extra, args=("--check",)):
    """Runs deploy/docker/entrypoint.sh as the pod does, with scg as the binary;
    returns (exit code, output, rendered config text)."""
    tpl = os.path.join(tmp, "template.yaml")
    out = os.path.join(tmp, "run", "scg.yaml")
    with open(tpl, "w") as f:
        f.write(template_text)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "SCG_BIN": SCG,
           "SCG_CONFIG_TEMPLATE": tpl, "SCG_CONFIG": out, **env_extra}
    r = subprocess.run(["sh", ENTRYPOINT, *args], env=env, capture_output=True, text=True, timeout=60)
    rendered = open(out).read() if os.path.exists(out) else ""
    return r.returncode, r.stdout + r.stderr, rendered


def pod_env(objs):
    return {e["name"]: e for e in only(objs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]["env"]}


# --- checks on the plain manifests

def check_k8s_matches_render():
    """deploy/k8s/ is what deploy/render.py renders now (no drift from values.yaml)."""
    files = render.render(render.load_values([]))
    committed = sorted(n for n in os.listdir(K8S) if n.endswith(".yaml"))
    assert committed == sorted(files), f"deploy/k8s has {committed}, render.py renders {sorted(files)}"
    for name, text in files.items():
        with open(os.path.join(K8S, name)) as f:
            assert f.read() == text, f"deploy/k8s/{name} differs from render.py's output: run python3 deploy/render.py"


def check_yaml_parses():
    """Every YAML document under deploy/ parses, and every Kubernetes object has kind and name."""
    n = 0
    for dirpath, _, names in os.walk(DEPLOY):
        if os.path.join("helm", "scg", "templates") in dirpath:
            continue  # Go templates: see check_helm_templates
        for name in names:
            if name.endswith(".yaml"):
                for d in load_docs(os.path.join(dirpath, name)):
                    n += 1
                    if "kind" in d:
                        assert d.get("kind") and d.get("metadata", {}).get("name"), f"{name}: object without kind/name"
    assert n > 10, f"only {n} YAML documents found"


def check_objects(objs):
    kinds = sorted(o["kind"] for o in objs.values())
    assert kinds == ["ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service", "StatefulSet"], kinds
    for o in objs.values():
        assert o["metadata"].get("namespace") == "scg", f"{o['kind']}/{o['metadata']['name']} not in namespace scg"
    sts = only(objs, "StatefulSet")
    assert sts["spec"]["replicas"] == 3, "three replicas by default"
    text = "\n".join(yaml.safe_dump(o) for o in objs.values()).lower()
    assert "redis" not in text, "no Redis anywhere"


def check_selectors(objs):
    """The StatefulSet selects its own pods; both Services and the PDB select them too."""
    sts = only(objs, "StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    assert selects(sts["spec"]["selector"]["matchLabels"], pod_labels), "StatefulSet selector vs pod labels"
    services = [o for o in objs.values() if o["kind"] == "Service"]
    for svc in services:
        assert selects(svc["spec"]["selector"], pod_labels), f"Service {svc['metadata']['name']} selects no scg pod"
    pdb = only(objs, "PodDisruptionBudget")
    assert selects(pdb["spec"]["selector"]["matchLabels"], pod_labels), "PDB selector vs pod labels"
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable"), "PDB without a budget"


def check_services(objs):
    """The headless Service is the StatefulSet's serviceName and publishes pods before they are
    ready; the client Service serves the client port; target ports are container ports."""
    sts = only(objs, "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    peers = objs[f"Service/{sts['spec']['serviceName']}"]
    assert peers["spec"].get("clusterIP") == "None", "the peer Service must be headless"
    assert peers["spec"].get("publishNotReadyAddresses") is True, \
        "pods are not ready before their first sync: the peer name must list them anyway"
    client = next(o for o in objs.values() if o["kind"] == "Service" and o is not peers)
    cfg = yaml.safe_load(config_template(objs))
    assert [p["port"] for p in client["spec"]["ports"]] == [port_of(cfg["bind_addr"])], "client Service ports"
    for svc in (peers, client):
        for p in svc["spec"]["ports"]:
            assert container_port(container, p["targetPort"]) == p["port"], \
                f"Service {svc['metadata']['name']} port {p['port']} targets another port"
    assert port_of(cfg["cluster"]["bind_addr"]) in [p["port"] for p in peers["spec"]["ports"]]


def check_ports_and_probes(objs):
    """Container ports are the config's bind_addr, admin_addr, admin.probe_addr and cluster
    ports; the probes hit /readyz and /healthz on the probe listener (nothing else uses it)."""
    container = only(objs, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    cfg = yaml.safe_load(config_template(objs))
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"client": port_of(cfg["bind_addr"]), "admin": port_of(cfg["admin_addr"]),
                     "cluster": port_of(cfg["cluster"]["bind_addr"]),
                     "probe": port_of(cfg["admin"]["probe_addr"])}, ports
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path, f"{probe} path {get['path']}"
        assert container_port(container, get["port"]) == port_of(cfg["admin"]["probe_addr"]), f"{probe} port"


def check_admin_tokens(objs):
    """The admin plane's token files are in the mounted Secret (read-only), never in the ConfigMap."""
    spec = only(objs, "StatefulSet")["spec"]["template"]["spec"]
    cfg = yaml.safe_load(config_template(objs))
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets.get("admin-tokens") == "scg-admin", secrets
    assert mounts["admin-tokens"]["readOnly"] is True
    for key in ("token_file", "read_token_file"):
        assert os.path.dirname(cfg["admin"][key]) == mounts["admin-tokens"]["mountPath"], key
    assert "allow_unauthenticated" not in cfg["admin"], "the chart never opens the admin plane"


def check_seeds(objs):
    """cluster.seeds is the headless Service's DNS name on the cluster port."""
    sts = only(objs, "StatefulSet")
    cfg = yaml.safe_load(config_template(objs))
    seeds = cfg["cluster"]["seeds"]
    assert seeds == [f"{sts['spec']['serviceName']}.scg.svc.cluster.local:{port_of(cfg['cluster']['bind_addr'])}"], seeds


def check_network_policy(objs):
    """The NetworkPolicy selects the scg pods; the cluster port admits scg pods only; every
    rule names its ports (a rule without ports would open the cluster port too)."""
    np = only(objs, "NetworkPolicy")
    sts = only(objs, "StatefulSet")
    pod_labels = sts["spec"]["template"]["metadata"]["labels"]
    cfg = yaml.safe_load(config_template(objs))
    cluster_port = port_of(cfg["cluster"]["bind_addr"])
    assert selects(np["spec"]["podSelector"]["matchLabels"], pod_labels), "NetworkPolicy selects no scg pod"
    assert "Ingress" in np["spec"]["policyTypes"]
    covering = []
    for rule in np["spec"]["ingress"]:
        assert rule.get("ports"), "an ingress rule without ports opens every port"
        if any(p["port"] in (cluster_port, "cluster") for p in rule["ports"]):
            covering.append(rule)
    assert len(covering) == 1, "exactly one rule covers the cluster port"
    peers = covering[0].get("from")
    assert peers, "the cluster port rule must name its peers"
    for peer in peers:
        assert set(peer) == {"podSelector"}, f"cluster port open to {peer}"
        assert selects(peer["podSelector"].get("matchLabels", {}), pod_labels), f"cluster port open to {peer}"
        assert peer["podSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"], \
            "cluster port peers must be selected like the StatefulSet selects its pods"


def check_grace_period(objs):
    """terminationGracePeriodSeconds > preStop sleep + shutdown.deadline_secs."""
    spec = only(objs, "StatefulSet")["spec"]["template"]["spec"]
    cfg = yaml.safe_load(config_template(objs))
    sleep = int(spec["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][-1])
    deadline = cfg["shutdown"]["deadline_secs"]
    assert spec["terminationGracePeriodSeconds"] > sleep + deadline, \
        f"grace {spec['terminationGracePeriodSeconds']} <= preStop {sleep} + deadline {deadline}"


def check_pod_security(objs):
    spec = only(objs, "StatefulSet")["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert spec["securityContext"]["runAsNonRoot"] and spec["securityContext"]["runAsUser"] == 10001
    assert c["securityContext"]["readOnlyRootFilesystem"] and not c["securityContext"]["allowPrivilegeEscalation"]
    assert c["command"] == [render.ENTRYPOINT]
    assert c["resources"].get("requests") and c["resources"].get("limits"), "resources"
    assert spec.get("affinity", {}).get("podAntiAffinity"), "anti-affinity by default"
    env = pod_env(objs)
    assert c["volumeMounts"][0]["mountPath"] + "/scg.yaml" == env["SCG_CONFIG_TEMPLATE"]["value"]
    run = next(m for m in c["volumeMounts"] if m["name"] == "run")["mountPath"]
    assert os.path.dirname(env["SCG_CONFIG"]["value"]) == run, "the rendered config must land on a writable volume"


def check_secrets_stay_out(objs):
    """Every placeholder in the config template has an env var in the pod; the cluster
    identity comes from a Secret, not from the ConfigMap."""
    tpl = config_template(objs)
    env = pod_env(objs)
    for name in set(re.findall(r"\$\{(SCG_[A-Z0-9_]+)\}", tpl)):
        assert name in env, f"the template uses ${{{name}}} but the pod has no {name}"
    assert yaml.safe_load(tpl)["cluster"]["identity"] == "${SCG_CLUSTER_IDENTITY}"
    assert "secretKeyRef" in env["SCG_CLUSTER_IDENTITY"]["valueFrom"]
    assert not any(o["kind"] == "Secret" for o in objs.values()), "no Secret objects: their values are the user's"


def check_config_passes_scg(objs, tmp, label):
    """The entrypoint renders the ConfigMap's template and `scg --check-config` accepts it;
    a nasty identity survives the substitution unchanged."""
    identity = "s3cr'et&\\|/ \"q\" #x: y"
    # The admin token files come from a Secret volume in the pod: stand-ins here.
    tokens = os.path.join(tmp, "admin-tokens")
    os.makedirs(tokens, exist_ok=True)
    for name in ("admin-token", "read-token"):
        with open(os.path.join(tokens, name), "w") as f:
            f.write(name + "-value\n")
    template = config_template(objs).replace(render.ADMIN_DIR + "/", tokens + "/")
    code, out, rendered = run_entrypoint(template, tmp, {
        "SCG_NODE_NAME": "scg-1", "SCG_POD_IP": "10.244.1.7", "SCG_CLUSTER_IDENTITY": identity + "\n"})
    assert code == 0, f"{label}: scg --check-config failed: {out.strip()}"
    cfg = yaml.safe_load(rendered)
    assert cfg["cluster"]["node_name"] == "scg-1"
    assert cfg["cluster"]["bind_addr"] == "10.244.1.7:7400"
    assert cfg["cluster"]["identity"] == identity, f"identity came out as {cfg['cluster']['identity']!r}"
    assert os.stat(os.path.join(tmp, "run", "scg.yaml")).st_mode & 0o077 == 0, "rendered config readable by others"
    return cfg


def check_entrypoint_refuses_missing_values(objs, tmp):
    code, out, _ = run_entrypoint(config_template(objs), tmp, {"SCG_POD_IP": "10.0.0.1"})
    assert code != 0 and "SCG_CLUSTER_IDENTITY" in out, f"missing identity not refused: {out}"
    code, out, _ = run_entrypoint(config_template(objs), tmp, {"SCG_POD_IP": "10.0.0.1",
                                                               "SCG_CLUSTER_IDENTITY": "a\nb"})
    assert code != 0 and "newline" in out, f"identity with a newline not refused: {out}"
    code, out, _ = run_entrypoint("", tmp, {}, args=("--version",))
    assert code == 0 and out.startswith("scg "), f"--version: {out}"


def check_cluster_tls_variant(tmp):
    """With cluster.tls enabled, the config names files in the mounted Secret and still passes scg."""
    path = os.path.join(tmp, "tls-values.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"cluster": {"tls": {"enabled": True}}}, f)
    files = render.render(render.load_values([path]))
    objs = {}
    for text in files.values():
        for d in yaml.safe_load_all(text):
            objs[f"{d['kind']}/{d['metadata']['name']}"] = d
    cfg = check_config_passes_scg(objs, tmp, "cluster TLS variant")
    spec = only(objs, "StatefulSet")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
    secrets = {v["name"]: v["secret"]["secretName"] for v in spec["volumes"] if "secret" in v}
    assert secrets == {"cluster-tls": "scg-cluster-tls", "admin-tokens": "scg-admin"}, secrets
    for key in ("cert_file", "key_file", "ca_file"):
        assert os.path.dirname(cfg["cluster"]["tls"][key]) == mounts["cluster-tls"], key


def check_planned_keys_render_only_when_enabled(tmp):
    """Front-door TLS, auth and backend_token (not accepted by scg yet) are absent by default
    and render, with their Secrets, when enabled."""
    default = yaml.safe_load(render.scg_config(render.load_values([]), {"peers": "p", "namespace": "n"}))
    assert not {"tls", "auth", "backend_token"} & set(default), "planned keys must be off by default"
    path = os.path.join(tmp, "planned-values.yaml")
    with open(path, "w") as f:
        yaml.safe_dump({"frontDoorTls": {"enabled": True}, "backendToken": {"enabled": True},
                        "auth": {"type": "static", "tokens": [{"token": "t", "user_id": "u"}]}}, f)
    files = render.render(render.load_values([path]))
    objs = {}
    for text in files.values():
        for d in yaml.safe_load_all(text):
            objs[f"{d['kind']}/{d['metadata']['name']}"] = d
    cfg = yaml.safe_load(config_template(objs))
    assert cfg["backend_token"] == {"kind": "env", "name": "SCG_BACKEND_TOKEN"}
    assert cfg["auth"]["type"] == "static" and cfg["tls"]["cert_file"].startswith(render.FRONT_TLS_DIR)
    env = pod_env(objs)
    assert env["SCG_BACKEND_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "spark-connect-token", "key": "token"}


def check_backend_discovery(tmp):
    """backendDiscovery renders nothing by default. Enabled (render.py into a temp dir, in a release
    namespace other than the discovery one): a ServiceAccount the pods run as, with its token
    mounted; a Role in the discovery namespace granting exactly get/list/watch on endpointslices;
    a RoleBinding there binding it to that ServiceAccount; and a config with backend_discovery
    that passes scg --check-config after the entrypoint's substitution."""
    values = render.load_values([])
    bd = values["backendDiscovery"]
    assert bd["enabled"] is False, "backendDiscovery must be off by default"
    default = {}
    for text in render.render(values).values():
        for d in yaml.safe_load_all(text):
            default[f"{d['kind']}/{d['metadata']['name']}"] = d
    assert not {o["kind"] for o in default.values()} & {"ServiceAccount", "Role", "RoleBinding"}, "RBAC by default"
    spec = only(default, "StatefulSet")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False and "serviceAccountName" not in spec
    assert "backend_discovery" not in yaml.safe_load(config_template(default))

    release_ns = "gateway"
    assert bd["namespace"] != release_ns
    vals = os.path.join(tmp, "discovery-values.yaml")
    with open(vals, "w") as f:
        yaml.safe_dump({"backendDiscovery": {"enabled": True}, "config": {"backends": []}}, f)
    out = os.path.join(tmp, "discovery-k8s")
    r = subprocess.run([sys.executable, os.path.join(DEPLOY, "render.py"), "-f", vals, "--namespace", release_ns,
                        "--out", out], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"render.py: {r.stdout}{r.stderr}"
    objs = load_dir(out)
    kinds = sorted(o["kind"] for o in objs.values())
    assert kinds == sorted(["ConfigMap", "NetworkPolicy", "PodDisruptionBudget", "Service", "Service", "StatefulSet",
                            "ServiceAccount", "Role", "RoleBinding"]), kinds

    sts = only(objs, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    assert spec.get("automountServiceAccountToken") is True, "the pods need their token to reach the API server"
    sa_name = spec.get("serviceAccountName")
    sa = only(objs, "ServiceAccount")
    assert sa_name and sa["metadata"]["name"] == sa_name, f"the pods run as {sa_name!r}, not the chart's ServiceAccount"
    assert sa["metadata"]["namespace"] == sts["metadata"]["namespace"] == release_ns

    role = only(objs, "Role")
    assert role["metadata"]["namespace"] == bd["namespace"], "the Role belongs in the discovery namespace"
    assert len(role["rules"]) == 1, f"the Role grants more than one rule: {role['rules']}"
    rule = role["rules"][0]
    assert set(rule) == {"apiGroups", "resources", "verbs"}, f"unexpected rule keys: {sorted(rule)}"
    assert rule["apiGroups"] == ["discovery.k8s.io"], rule["apiGroups"]
    assert rule["resources"] == ["endpointslices"], rule["resources"]
    assert sorted(rule["verbs"]) == ["get", "list", "watch"], rule["verbs"]

    rb = only(objs, "RoleBinding")
    assert rb["metadata"]["namespace"] == bd["namespace"], "the RoleBinding belongs in the discovery namespace"
    assert rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                             "name": role["metadata"]["name"]}, rb["roleRef"]
    assert rb["subjects"] == [{"kind": "ServiceAccount", "name": sa_name, "namespace": sts["metadata"]["namespace"]}], \
        f"the RoleBinding binds {rb['subjects']}, the pods run as {sa_name} in {sts['metadata']['namespace']}"

    np = only(objs, "NetworkPolicy")
    assert np["spec"]["policyTypes"] == ["Ingress"] and "egress" not in np["spec"], \
        "the NetworkPolicy restricts egress now: let scg reach the API server, then check that here"

    cfg = check_config_passes_scg(objs, tmp, "backendDiscovery variant")
    assert cfg["backend_discovery"] == {"type": "k8s", "namespace": bd["namespace"], "service_name": bd["serviceName"],
                                        "port": bd["port"], "ui_url": bd["uiUrl"]}, cfg["backend_discovery"]
    assert not cfg.get("backends"), "the variant relies on discovery alone"


# --- the chart

VALUE_REF = re.compile(r"\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def check_helm_templates():
    """Each template holds the kind render.py builds, reads only values that exist, and parses
    as YAML once {{ }} actions are blanked out."""
    tdir = os.path.join(CHART, "templates")
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    expect = {"configmap.yaml": "ConfigMap", "statefulset.yaml": "StatefulSet", "service.yaml": "Service",
              "service-peers.yaml": "Service", "pdb.yaml": "PodDisruptionBudget",
              "networkpolicy.yaml": "NetworkPolicy", "serviceaccount.yaml": "ServiceAccount",
              "role.yaml": "Role", "rolebinding.yaml": "RoleBinding"}
    templates = {n for n in os.listdir(tdir) if n.endswith(".yaml")}
    assert set(expect) == templates, f"templates/ holds {sorted(templates)}, expected {sorted(expect)}"
    assert set(os.listdir(K8S)) <= set(expect), "deploy/k8s holds files no template makes"
    everything = render.merge(render.load_values([]), {"backendDiscovery": {"enabled": True}})
    assert set(render.render(everything)) == set(expect), "render.py and the templates make different files"
    for name, kind in expect.items():
        with open(os.path.join(tdir, name)) as f:
            text = f.read()
        assert re.search(rf"^kind: {kind}$", text, re.M), f"templates/{name} has no kind: {kind}"
        # blank out actions: whole-line actions go, inline ones become a word
        lines = [ln for ln in text.splitlines() if not re.fullmatch(r"\s*\{\{.*\}\}\s*", ln)]
        blanked = re.sub(r"\{\{.*?\}\}", "x", "\n".join(lines))
        docs = [d for d in yaml.safe_load_all(blanked) if d]
        assert len(docs) == 1 and docs[0]["kind"] == kind, f"templates/{name} does not parse to one {kind}"
    for name in os.listdir(tdir):
        with open(os.path.join(tdir, name)) as f:
            for ref in VALUE_REF.findall(f.read()):
                node = values
                for key in ref.strip(".").split("."):
                    assert isinstance(node, dict) and key in node, f"templates/{name} reads .Values{ref}, not in values.yaml"
                    node = node[key]


# Values that switch every optional part on, and off.
VARIANTS = {
    "everything-on": {
        "cluster": {"tls": {"enabled": True}}, "frontDoorTls": {"enabled": True},
        "backendToken": {"enabled": True}, "auth": {"type": "static", "tokens": [{"token": "t", "user_id": "u"}]},
        "antiAffinity": "hard", "podAnnotations": {"prometheus.io/scrape": "true"},
        "networkPolicy": {"clientFrom": [{"namespaceSelector": {"matchLabels": {"team": "a"}}}], "adminFrom": []},
        "imagePullSecrets": [{"name": "regcred"}], "nodeSelector": {"disk": "ssd"},
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "service": {"type": "LoadBalancer", "annotations": {"a": "b"}}, "image": {"tag": "9.9"},
        "backendDiscovery": {"enabled": True, "namespace": "scg", "serviceName": "sc", "port": 15009, "uiUrl": ""},
    },
    "discovery": {"backendDiscovery": {"enabled": True}, "config": {"backends": []}},
    "everything-off": {"antiAffinity": "none", "networkPolicy": {"enabled": False}, "fullnameOverride": "gw",
                       "replicaCount": 5},
}


def comparable(obj):
    """An object without what only one side sets: the release namespace (render.py; objects in
    another namespace name it on both sides), Helm's own labels, the config checksum (over
    different text); the config parsed."""
    obj = copy.deepcopy(obj)
    metas = [obj["metadata"]] + ([obj["spec"]["template"]["metadata"]] if obj["kind"] == "StatefulSet" else [])
    for md in metas:
        if md.get("namespace") == "scg":
            del md["namespace"]
        for key in ("app.kubernetes.io/managed-by", "helm.sh/chart"):
            md.get("labels", {}).pop(key, None)
        md.get("annotations", {}).pop("checksum/config", None)
        if md.get("annotations") == {}:
            del md["annotations"]
    if obj["kind"] == "ConfigMap":
        obj["data"]["scg.yaml"] = yaml.safe_load(obj["data"]["scg.yaml"])
    return obj


def check_helm_renders_like_render_py(tmp):
    """helmlite renders the chart's templates (Go text/template + Sprig, as Helm does) into the
    same objects as render.py, for the default values and each variant."""
    # scripts/setup.sh installs both: a check that cannot run fails, it never passes unrun.
    assert shutil.which("go") and os.path.isdir(SPRIG), \
        "rendering the chart needs golang-go and golang-github-masterminds-sprig-dev (scripts/setup.sh installs them)"
    gopath = os.path.join(tmp, "gopath")
    os.makedirs(os.path.join(gopath, "src"))
    os.symlink(HELMLITE, os.path.join(gopath, "src", "helmlite"))
    binary = os.path.join(tmp, "helmlite-bin")
    env = {**os.environ, "GO111MODULE": "off", "GOPATH": gopath + ":/usr/share/gocode", "GOFLAGS": ""}
    if not os.environ.get("HOME"):
        env["GOCACHE"] = os.path.join(tmp, "gocache")
    r = subprocess.run(["go", "build", "-o", binary, "."], cwd=os.path.join(gopath, "src", "helmlite"), env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"building helmlite: {r.stderr}"
    for variant, values in [("default", None), *VARIANTS.items()]:
        files = []
        if values is not None:
            files = [os.path.join(tmp, f"{variant}.yaml")]
            with open(files[0], "w") as f:
                yaml.safe_dump(values, f)
        r = subprocess.run([binary, CHART, *files], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{variant}: helmlite: {r.stderr}"
        helm = {f"{d['kind']}/{d['metadata']['name']}": comparable(d) for d in yaml.safe_load_all(r.stdout) if d}
        py = {}
        for text in render.render(render.load_values(files)).values():
            for d in yaml.safe_load_all(text):
                py[f"{d['kind']}/{d['metadata']['name']}"] = comparable(d)
        assert sorted(helm) == sorted(py), f"{variant}: Helm renders {sorted(helm)}, render.py {sorted(py)}"
        for key in helm:
            assert helm[key] == py[key], f"{variant}: {key} differs:\nhelm:      {helm[key]}\nrender.py: {py[key]}"


def check_versions():
    """The chart's appVersion is scg's version (CMakeLists.txt project VERSION)."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(scg VERSION ([0-9.]+)", f.read()).group(1)
    assert str(render.chart_meta()["appVersion"]) == version, "Chart.yaml appVersion != CMake project VERSION"
    out = subprocess.run([SCG, "--version"], capture_output=True, text=True).stdout.split()
    assert out[-1] == version, f"scg --version says {out}"


# --- examples and host installs

def check_spark_examples(objs):
    """The Spark Connect pool carries the settings docs/placement.md asks for, takes its token
    from the Secret the chart's backendToken names, admits scg pods, and is what the chart's
    default backends point at."""
    ex = {}
    for d in load_docs(os.path.join(DEPLOY, "examples", "spark-connect-pool.yaml")):
        ex[f"{d['kind']}/{d['metadata']['name']}"] = d
    conf = ex["ConfigMap/spark-connect-defaults"]["data"]["spark-defaults.conf"]
    settings = dict(ln.split(None, 1) for ln in conf.splitlines() if ln.strip() and not ln.startswith("#"))
    for key in ("spark.executor.maxNumFailures", "spark.executor.failuresValidityInterval", "spark.task.maxFailures",
                "spark.stage.maxConsecutiveAttempts", "spark.driver.maxResultSize",
                "spark.dynamicAllocation.enabled"):
        assert key in settings, f"spark-defaults.conf lacks {key}"
    assert settings["spark.dynamicAllocation.enabled"].strip() == "true"
    assert int(settings["spark.task.maxFailures"]) < 4 and int(settings["spark.stage.maxConsecutiveAttempts"]) < 4
    sts = ex["StatefulSet/spark-connect"]
    c = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in c["env"]}
    values = render.load_values([])
    ref = env["SPARK_CONNECT_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (values["backendToken"]["secretName"], values["backendToken"]["key"]), ref
    assert "spark.connect.authenticate.token" in c["args"][0]
    svc = ex[f"Service/{sts['spec']['serviceName']}"]
    assert selects(svc["spec"]["selector"], sts["spec"]["template"]["metadata"]["labels"])
    grpc = container_port(c, "grpc")
    assert grpc == int(settings["spark.connect.grpc.binding.port"])
    ui = container_port(c, "ui")
    for i, b in enumerate(values["config"]["backends"]):
        assert b["address"] == f"spark-connect-{i}.{svc['metadata']['name']}:{grpc}", b
        assert b["ui_url"] == f"http://spark-connect-{i}.{svc['metadata']['name']}:{ui}", b
        assert i < sts["spec"]["replicas"], f"backend {b['name']} has no pod"
    scg_pods = only(objs, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    np = ex["NetworkPolicy/spark-connect"]
    grpc_rules = [r for r in np["spec"]["ingress"] if any(p["port"] == grpc for p in r["ports"])]
    assert len(grpc_rules) == 1 and all(selects(p["podSelector"]["matchLabels"], scg_pods)
                                        for p in grpc_rules[0]["from"]), "only scg reaches the gRPC port"


def check_autoscaling_examples():
    """The KEDA and HPA examples scale the pool example's StatefulSet on a pool series scg exports and
    documents, with scale-down off (a removed pod ends its sessions)."""
    pool = {f"{d['kind']}/{d['metadata']['name']}": d
            for d in load_docs(os.path.join(DEPLOY, "examples", "spark-connect-pool.yaml"))}
    sts = pool["StatefulSet/spark-connect"]
    with open(os.path.join(ROOT, "docs", "observability.md")) as f:
        documented = set(re.findall(r"`(scg_pool_[a-z_]+)", f.read()))
    assert "scg_pool_saturation" in documented, "docs/observability.md documents no scg_pool_saturation"

    def targets_pool(ref):
        assert (ref["apiVersion"], ref["kind"], ref["name"]) == ("apps/v1", "StatefulSet", sts["metadata"]["name"]), ref

    keda = {d["kind"]: d for d in load_docs(os.path.join(DEPLOY, "examples", "spark-connect-keda.yaml"))}
    so = keda["ScaledObject"]
    assert so["metadata"]["namespace"] == sts["metadata"]["namespace"]
    targets_pool(so["spec"]["scaleTargetRef"])
    assert so["spec"]["minReplicaCount"] >= 1 and so["spec"]["maxReplicaCount"] > so["spec"]["minReplicaCount"]
    [trigger] = so["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value", trigger
    used = set(re.findall(r"scg_[a-z_]+", trigger["metadata"]["query"]))
    assert used and used <= documented, f"the query uses {used - documented}, not documented pool series"
    assert 0 < float(trigger["metadata"]["threshold"]) <= 1, "saturation is within [0, 1]"
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["selectPolicy"] == "Disabled"

    hpa_docs = {d["kind"]: d for d in load_docs(os.path.join(DEPLOY, "examples", "spark-connect-hpa.yaml"))}
    hpa = hpa_docs["HorizontalPodAutoscaler"]
    targets_pool(hpa["spec"]["scaleTargetRef"])
    [metric] = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    rules = yaml.safe_load(hpa_docs["ConfigMap"]["data"]["config.yaml"])["externalRules"]
    served = {r["name"]["as"]: r for r in rules}
    name = metric["external"]["metric"]["name"]
    assert name in served, f"prometheus-adapter serves no {name}"
    assert set(re.findall(r"scg_[a-z_]+", served[name]["seriesQuery"])) <= documented
    assert metric["external"]["metric"]["selector"]["matchLabels"]["pool"] == "_all"
    assert hpa["spec"]["behavior"]["scaleDown"]["selectPolicy"] == "Disabled"


def check_systemd(tmp):
    """The systemd example config passes scg --check-config; the unit runs it and waits for the drain."""
    r = subprocess.run([SCG, "--check-config", os.path.join(DEPLOY, "systemd", "scg.yaml")],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"deploy/systemd/scg.yaml: {r.stdout}{r.stderr}"
    unit = {}
    with open(os.path.join(DEPLOY, "systemd", "scg.service")) as f:
        for ln in f:
            if "=" in ln and not ln.startswith("#"):
                k, v = ln.rstrip("\n").split("=", 1)
                unit.setdefault(k, v)
    assert unit["ExecStart"] == "/usr/local/bin/scg --config /etc/scg/scg.yaml"
    with open(os.path.join(DEPLOY, "systemd", "scg.yaml")) as f:
        deadline = yaml.safe_load(f)["shutdown"]["deadline_secs"]
    assert int(unit["TimeoutStopSec"]) > deadline, "TimeoutStopSec must exceed shutdown.deadline_secs"
    assert unit["User"] != "root"
    if shutil.which("systemd-analyze"):
        r = subprocess.run(["systemd-analyze", "verify", os.path.join(DEPLOY, "systemd", "scg.service")],
                           capture_output=True, text=True)
        bad = [ln for ln in r.stderr.splitlines() if "scg.service" in ln and "/usr/local/bin/scg" not in ln]
        assert not bad, "\n".join(bad)


def dockerfile_runtime_packages():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read().replace("\\\n", " ")
    runtime = text.split("FROM debian:bookworm-slim", 1)[1]
    m = re.search(r"apt-get install -y --no-install-recommends ([^&]+)&&", runtime)
    return text, runtime, m.group(1).split()


def check_dockerfile():
    """Two stages from bookworm, a non-root user, the ports of the chart, the entrypoint the pod runs."""
    text, runtime, pkgs = dockerfile_runtime_packages()
    assert re.search(r"^FROM debian:bookworm AS build$", text, re.M), "build stage: FROM debian:bookworm AS build"
    assert re.search(r"^USER 10001:10001$", runtime, re.M), "the runtime stage runs as USER 10001:10001"
    v = render.load_values([])["ports"]
    assert re.search(rf"^EXPOSE {v['client']} {v['admin']} {v['cluster']}$", runtime, re.M), \
        f"EXPOSE {v['client']} {v['admin']} {v['cluster']} (the chart's ports)"
    assert f'ENTRYPOINT ["{render.ENTRYPOINT}"]' in runtime, f"ENTRYPOINT is {render.ENTRYPOINT}"
    assert f"COPY deploy/docker/entrypoint.sh {render.ENTRYPOINT}" in runtime, "the image ships the entrypoint"
    assert "bash /src/scripts/setup.sh" in text, "the build stage installs what scripts/setup.sh installs"
    assert len(pkgs) >= 5, pkgs


def check_dockerfile_packages_exist():
    """Each runtime package of the Dockerfile is known to apt (skipped without apt-cache)."""
    if not shutil.which("apt-cache"):
        return "skipped: no apt-cache"
    _, _, pkgs = dockerfile_runtime_packages()
    missing = []
    for p in pkgs:
        out = subprocess.run(["apt-cache", "policy", p], capture_output=True, text=True).stdout
        m = re.search(r"Candidate: (\S+)", out)
        if not m or m.group(1) == "(none)":
            missing.append(p)
    assert not missing, f"apt knows no candidate for {missing}"


BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}  # in debian:bookworm-slim already


def check_dockerfile_covers_binary():
    """Every shared library scg loads directly comes from a runtime package of the Dockerfile
    (skipped without ldd/dpkg)."""
    if not (shutil.which("ldd") and shutil.which("dpkg") and shutil.which("objdump")):
        return "skipped: no ldd, dpkg or objdump"
    _, _, pkgs = dockerfile_runtime_packages()
    needed = re.findall(r"NEEDED\s+(\S+)", subprocess.run(["objdump", "-p", SCG], capture_output=True,
                                                           text=True).stdout)
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", subprocess.run(["ldd", SCG], capture_output=True,
                                                                   text=True).stdout, re.M))
    uncovered = []
    for lib in needed:
        path = paths.get(lib)
        assert path and path != "not", f"ldd cannot find {lib}"
        owner = None
        for candidate in (path, os.path.realpath(path)):
            r = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if r.returncode == 0:
                owner = r.stdout.split(":")[0]
                break
        if owner is None:
            return f"skipped: {lib} ({path}) belongs to no package (a local build?)"
        if owner not in pkgs and owner not in BASE_PACKAGES:
            uncovered.append(f"{lib} ({owner})")
    assert not uncovered, f"the runtime stage lacks {uncovered}"


def main():
    global SCG
    if len(sys.argv) != 2 or not os.access(sys.argv[1], os.X_OK):
        sys.exit("usage: check_manifests.py PATH/TO/scg")
    SCG = os.path.abspath(sys.argv[1])
    objs = load_dir(K8S)
    tmp = tempfile.mkdtemp(prefix="scg-deploy-")
    checks = [
        ("deploy/k8s is what render.py renders", check_k8s_matches_render),
        ("every YAML document parses", check_yaml_parses),
        ("the objects of the plain manifests", lambda: check_objects(objs)),
        ("selectors match the pod labels", lambda: check_selectors(objs)),
        ("services: headless peers, client port, target ports", lambda: check_services(objs)),
        ("container ports are the config's; probes on the probe listener", lambda: check_ports_and_probes(objs)),
        ("the admin tokens come from the mounted Secret", lambda: check_admin_tokens(objs)),
        ("cluster.seeds is the headless Service", lambda: check_seeds(objs)),
        ("the NetworkPolicy opens the cluster port to scg pods only", lambda: check_network_policy(objs)),
        ("terminationGracePeriodSeconds exceeds preStop + drain", lambda: check_grace_period(objs)),
        ("pod security and the entrypoint", lambda: check_pod_security(objs)),
        ("secrets stay out of the ConfigMap", lambda: check_secrets_stay_out(objs)),
        ("the rendered config passes scg --check-config", lambda: check_config_passes_scg(objs, tmp, "default") and None),
        ("the entrypoint refuses missing or multi-line values", lambda: check_entrypoint_refuses_missing_values(objs, tmp)),
        ("the cluster TLS variant passes scg --check-config", lambda: check_cluster_tls_variant(tmp)),
        ("planned keys render only when enabled", lambda: check_planned_keys_render_only_when_enabled(tmp)),
        ("backendDiscovery: RBAC, service account and config", lambda: check_backend_discovery(tmp)),
        ("the Helm templates", check_helm_templates),
        ("the Helm templates render what render.py renders", lambda: check_helm_renders_like_render_py(tmp)),
        ("versions agree", check_versions),
        ("the Spark Connect pool example", lambda: check_spark_examples(objs)),
        ("the pool autoscaling examples (KEDA, HPA)", check_autoscaling_examples),
        ("the systemd unit and its config", lambda: check_systemd(tmp)),
        ("the Dockerfile", check_dockerfile),
        ("the Dockerfile's runtime packages exist", check_dockerfile_packages_exist),
        ("the Dockerfile's runtime packages cover scg's libraries", check_dockerfile_covers_binary),
    ]
    failed = 0
    try:
        for name, fn in checks:
            try:
                note = fn()
                print(f"ok   {name}" + (f" ({note})" if note else ""))
            except Exception as e:  # report every failing check, not just the first
                failed += 1
                detail = str(e) if isinstance(e, AssertionError) else traceback.format_exc()
                print(f"FAIL {name}: {detail}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(checks) - failed}/{len(checks)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
