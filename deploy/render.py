#!/usr/bin/env python3
"""Render the scg chart's values into plain Kubernetes manifests.

    python3 deploy/render.py                       # deploy/helm/scg/values.yaml -> deploy/k8s/
    python3 deploy/render.py -f my-values.yaml --namespace spark --out /tmp/scg-k8s

It builds the same objects as the Helm templates under deploy/helm/scg/templates/
(ConfigMap, StatefulSet, client Service, headless peer Service, PodDisruptionBudget,
NetworkPolicy; with backendDiscovery.enabled also ServiceAccount, Role, RoleBinding)
from the same values, without Helm. It is not a template engine:
when a template changes, change the matching function here too;
tests/deploy/check_manifests.py checks that deploy/k8s/ is what this script renders.

Needs python3 and PyYAML (Debian: python3-yaml).
"""
import argparse
import copy
import hashlib
import os
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(HERE, "helm", "scg")

# scg.yaml keys the chart sets itself; `config:` must not carry them.
RESERVED_CONFIG_KEYS = ("bind_addr", "admin_addr", "admin", "shutdown", "cluster", "tls", "auth", "backend_token",
                        "backend_discovery")

CONFIG_DIR = "/etc/scg/config"            # the ConfigMap: the config template
RUN_DIR = "/run/scg"                      # emptyDir: the rendered per-pod config
CLUSTER_TLS_DIR = "/etc/scg/tls/cluster"  # cluster.tls Secret
FRONT_TLS_DIR = "/etc/scg/tls/front"      # front-door tls Secret
ADMIN_DIR = "/etc/scg/admin"              # the admin plane's tokens Secret
ENTRYPOINT = "/usr/local/bin/scg-entrypoint"
UID = 10001


class single_quoted(str):
    """A string dumped as a single-quoted YAML scalar: the entrypoint's
    placeholders live in '...' so that any substituted value stays one scalar."""


class dumper(yaml.SafeDumper):
    def ignore_aliases(self, data):  # repeat shared label maps instead of writing &anchors
        return True


def _str(d, s):
    # Multi-line text (scg.yaml in the ConfigMap) as a | block; host:port and
    # URLs double-quoted, as people write them.
    style = "|" if "\n" in s else ('"' if ":" in s else None)
    return d.represent_scalar("tag:yaml.org,2002:str", s, style=style)


dumper.add_representer(str, _str)
dumper.add_representer(single_quoted, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="'"))


def dump(obj):
    return yaml.dump(obj, Dumper=dumper, sort_keys=False, default_flow_style=False, width=100)


def merge(base, override):
    """Helm's merge of values files: maps merge key by key, anything else replaces."""
    out = copy.deepcopy(base)
    for k, v in override.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def load_values(files):
    with open(os.path.join(CHART, "values.yaml")) as f:
        values = yaml.safe_load(f)
    for path in files:
        with open(path) as f:
            values = merge(values, yaml.safe_load(f) or {})
    return values


def chart_meta():
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        return yaml.safe_load(f)


# --- names and labels (templates/_helpers.tpl)

def fullname(v, release):
    if v.get("fullnameOverride"):
        return v["fullnameOverride"][:63].rstrip("-")
    name = v.get("nameOverride") or "scg"
    return (release if name in release else f"{release}-{name}")[:63].rstrip("-")


def selector_labels(v, release):
    return {"app.kubernetes.io/name": v.get("nameOverride") or "scg", "app.kubernetes.io/instance": release}


def labels(v, release, app_version):
    return {**selector_labels(v, release), "app.kubernetes.io/version": app_version}


def metadata(name, ctx, namespace=None, **extra):
    return {"name": name, "namespace": namespace or ctx["namespace"], "labels": ctx["labels"], **extra}


def discovery_rbac_name(ctx):
    """Name of backendDiscovery's Role and RoleBinding (scg.discoveryRbacName): they live in the
    discovery namespace, which releases in other namespaces may share."""
    return f"{ctx['name']}-{ctx['namespace']}-discovery"[:63].rstrip("-")


# --- objects

def scg_config(v, ctx):
    """The config template (templates/configmap.yaml): scg.yaml with ${SCG_...} placeholders."""
    reserved = [k for k in RESERVED_CONFIG_KEYS if k in (v.get("config") or {})]
    if reserved:
        sys.exit(f"render.py: config.{reserved[0]} is set by the chart; use the chart's own value for it")
    ports, c = v["ports"], v["cluster"]
    cfg = {"bind_addr": f"0.0.0.0:{ports['client']}", "admin_addr": f"0.0.0.0:{ports['admin']}"}
    a = v["admin"]
    cfg["admin"] = {"token_file": f"{ADMIN_DIR}/{a['adminKey']}", "read_token_file": f"{ADMIN_DIR}/{a['readKey']}",
                    "open_metrics": a["openMetrics"], "probe_addr": f"0.0.0.0:{ports['probe']}"}
    cfg["admin"].update(copy.deepcopy(a.get("limits") or {}))
    cfg.update(copy.deepcopy(v.get("config") or {}))
    bd = v["backendDiscovery"]
    if bd["enabled"]:
        cfg["backend_discovery"] = {"type": "k8s", "namespace": bd["namespace"], "service_name": bd["serviceName"],
                                    "port": bd["port"]}
        if bd.get("uiUrl"):
            cfg["backend_discovery"]["ui_url"] = bd["uiUrl"]
    cfg["shutdown"] = {"deadline_secs": v["shutdown"]["deadlineSecs"]}
    cluster = {
        "node_name": single_quoted("${SCG_NODE_NAME}"),
        "bind_addr": single_quoted(f"${{SCG_POD_IP}}:{ports['cluster']}"),
        "seeds": [single_quoted(f"{ctx['peers']}.{ctx['namespace']}.svc.{v['clusterDomain']}:{ports['cluster']}")],
        "identity": single_quoted("${SCG_CLUSTER_IDENTITY}"),
        "heartbeat_interval_ms": c["heartbeatIntervalMs"],
        "connection_timeout_ms": c["connectionTimeoutMs"],
        "sync_wait_secs": c["syncWaitSecs"],
    }
    if c["tls"]["enabled"]:
        cluster["tls"] = {"cert_file": f"{CLUSTER_TLS_DIR}/tls.crt", "key_file": f"{CLUSTER_TLS_DIR}/tls.key",
                          "ca_file": f"{CLUSTER_TLS_DIR}/ca.crt"}
    cfg["cluster"] = cluster
    if v["frontDoorTls"]["enabled"]:
        cfg["tls"] = {"cert_file": f"{FRONT_TLS_DIR}/tls.crt", "key_file": f"{FRONT_TLS_DIR}/tls.key"}
    if v.get("auth"):
        cfg["auth"] = copy.deepcopy(v["auth"])
    if v["backendToken"]["enabled"]:
        cfg["backend_token"] = {"kind": "env", "name": "SCG_BACKEND_TOKEN"}
    header = ("# Rendered per pod by scg-entrypoint: each ${SCG_...} placeholder is\n"
              "# replaced by the pod's environment variable of that name.\n")
    return header + dump(cfg)


def configmap(v, ctx):
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(ctx["name"] + "-config", ctx),
            "data": {"scg.yaml": scg_config(v, ctx)}}


def anti_affinity(v, ctx):
    term = {"labelSelector": {"matchLabels": ctx["selector"]}, "topologyKey": "kubernetes.io/hostname"}
    if v["antiAffinity"] == "hard":
        return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if v["antiAffinity"] == "soft":
        return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}]}}
    return None


def statefulset(v, ctx, config_checksum):
    ports, sd = v["ports"], v["shutdown"]
    env = [
        {"name": "SCG_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SCG_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "SCG_CLUSTER_IDENTITY", "valueFrom": {"secretKeyRef": {
            "name": v["cluster"]["identitySecret"]["name"], "key": v["cluster"]["identitySecret"]["key"]}}},
    ]
    if v["backendToken"]["enabled"]:
        env.append({"name": "SCG_BACKEND_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": v["backendToken"]["secretName"], "key": v["backendToken"]["key"]}}})
    env += [{"name": "SCG_CONFIG_TEMPLATE", "value": f"{CONFIG_DIR}/scg.yaml"},
            {"name": "SCG_CONFIG", "value": f"{RUN_DIR}/scg.yaml"}]
    mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
              {"name": "run", "mountPath": RUN_DIR},
              {"name": "admin-tokens", "mountPath": ADMIN_DIR, "readOnly": True}]
    volumes = [{"name": "config", "configMap": {"name": ctx["name"] + "-config"}},
               # holds the rendered config, cluster identity included: memory only
               {"name": "run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
               {"name": "admin-tokens", "secret": {"secretName": v["admin"]["secretName"], "defaultMode": 0o440}}]
    if v["cluster"]["tls"]["enabled"]:
        mounts.append({"name": "cluster-tls", "mountPath": CLUSTER_TLS_DIR, "readOnly": True})
        volumes.append({"name": "cluster-tls", "secret": {"secretName": v["cluster"]["tls"]["secretName"],
                                                          "defaultMode": 0o440}})
    if v["frontDoorTls"]["enabled"]:
        mounts.append({"name": "front-tls", "mountPath": FRONT_TLS_DIR, "readOnly": True})
        volumes.append({"name": "front-tls", "secret": {"secretName": v["frontDoorTls"]["secretName"],
                                                        "defaultMode": 0o440}})
    image = v["image"]
    container = {
        "name": "scg",
        "image": f"{image['repository']}:{image.get('tag') or ctx['app_version']}",
        "imagePullPolicy": image["pullPolicy"],
        "command": [ENTRYPOINT],
        "env": env,
        "ports": [{"name": "client", "containerPort": ports["client"], "protocol": "TCP"},
                  {"name": "admin", "containerPort": ports["admin"], "protocol": "TCP"},
                  {"name": "cluster", "containerPort": ports["cluster"], "protocol": "TCP"},
                  {"name": "probe", "containerPort": ports["probe"], "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "probe"}, **v["probes"]["readiness"]},
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "probe"}, **v["probes"]["liveness"]},
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(sd["preStopSleepSecs"])]}}},
        "resources": copy.deepcopy(v["resources"]),
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    pod_spec = {}
    if v["backendDiscovery"]["enabled"]:  # scg reads EndpointSlices with this account's token
        pod_spec["serviceAccountName"] = ctx["name"]
    pod_spec.update({
        "automountServiceAccountToken": bool(v["backendDiscovery"]["enabled"]),
        "terminationGracePeriodSeconds": sd["preStopSleepSecs"] + sd["deadlineSecs"] + sd["graceMarginSecs"],
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
    })
    if v.get("imagePullSecrets"):
        pod_spec["imagePullSecrets"] = copy.deepcopy(v["imagePullSecrets"])
    if anti_affinity(v, ctx):
        pod_spec["affinity"] = anti_affinity(v, ctx)
    for key in ("nodeSelector", "tolerations"):
        if v.get(key):
            pod_spec[key] = copy.deepcopy(v[key])
    pod_spec["containers"] = [container]
    pod_spec["volumes"] = volumes
    return {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata(ctx["name"], ctx),
        "spec": {
            "replicas": v["replicaCount"],
            "serviceName": ctx["peers"],
            # Replicas start together; rolling updates still go one pod at a time.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": ctx["selector"]},
            "template": {
                "metadata": {"labels": ctx["labels"],
                             "annotations": {"checksum/config": config_checksum, **(v.get("podAnnotations") or {})}},
                "spec": pod_spec,
            },
        },
    }


def client_service(v, ctx):
    md = metadata(ctx["name"], ctx)
    if v["service"].get("annotations"):
        md["annotations"] = copy.deepcopy(v["service"]["annotations"])
    return {"apiVersion": "v1", "kind": "Service", "metadata": md, "spec": {
        "type": v["service"]["type"],
        "selector": ctx["selector"],
        "ports": [{"name": "client", "port": v["ports"]["client"], "targetPort": "client", "protocol": "TCP"}],
    }}


def peers_service(v, ctx):
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata(ctx["peers"], ctx), "spec": {
        "clusterIP": "None",
        # Replicas are not ready before their first sync with a peer, so the
        # peer name must resolve to pods that are not ready yet.
        "publishNotReadyAddresses": True,
        "selector": ctx["selector"],
        "ports": [{"name": "cluster", "port": v["ports"]["cluster"], "targetPort": "cluster", "protocol": "TCP"},
                  {"name": "admin", "port": v["ports"]["admin"], "targetPort": "admin", "protocol": "TCP"}],
    }}


def pdb(v, ctx):
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": metadata(ctx["name"], ctx),
            "spec": {"maxUnavailable": v["podDisruptionBudget"]["maxUnavailable"],
                     "selector": {"matchLabels": ctx["selector"]}}}


def network_policy(v, ctx):
    np, ports = v["networkPolicy"], v["ports"]
    client_rule = {"ports": [{"port": ports["client"], "protocol": "TCP"}]}
    if np.get("clientFrom"):
        client_rule["from"] = copy.deepcopy(np["clientFrom"])
    admin_rule = {"ports": [{"port": ports["admin"], "protocol": "TCP"}]}
    if np.get("adminFrom"):
        admin_rule["from"] = copy.deepcopy(np["adminFrom"])
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata(ctx["name"], ctx),
            "spec": {
                "podSelector": {"matchLabels": ctx["selector"]},
                "policyTypes": ["Ingress"],
                "ingress": [
                    # the cluster port: scg replicas only
                    {"from": [{"podSelector": {"matchLabels": ctx["selector"]}}],
                     "ports": [{"port": ports["cluster"], "protocol": "TCP"}]},
                    client_rule,
                    admin_rule,
                ]}}


def service_account(v, ctx):
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(ctx["name"], ctx)}


def discovery_role(v, ctx):
    """backendDiscovery: read the EndpointSlices of the discovery namespace, nothing else."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": metadata(discovery_rbac_name(ctx), ctx, v["backendDiscovery"]["namespace"]),
            "rules": [{"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"],
                       "verbs": ["get", "list", "watch"]}]}


def discovery_role_binding(v, ctx):
    """discovery_role, in the discovery namespace, for scg's ServiceAccount in the release namespace."""
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": metadata(discovery_rbac_name(ctx), ctx, v["backendDiscovery"]["namespace"]),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": discovery_rbac_name(ctx)},
            "subjects": [{"kind": "ServiceAccount", "name": ctx["name"], "namespace": ctx["namespace"]}]}


def render(values, release="scg", namespace="scg"):
    """File name -> YAML text of every manifest, as under deploy/k8s/."""
    app_version = str(chart_meta()["appVersion"])
    name = fullname(values, release)
    ctx = {"name": name, "peers": name + "-peers", "namespace": namespace, "app_version": app_version,
           "selector": selector_labels(values, release), "labels": labels(values, release, app_version)}
    header = ("# Generated by deploy/render.py from deploy/helm/scg/values.yaml; do not edit.\n"
              "# The same objects as the Helm chart deploy/helm/scg/ renders.\n")
    cm = dump(configmap(values, ctx))
    files = {
        "configmap.yaml": cm,
        "statefulset.yaml": dump(statefulset(values, ctx, hashlib.sha256(cm.encode()).hexdigest())),
        "service.yaml": dump(client_service(values, ctx)),
        "service-peers.yaml": dump(peers_service(values, ctx)),
        "pdb.yaml": dump(pdb(values, ctx)),
    }
    if values["networkPolicy"]["enabled"]:
        files["networkpolicy.yaml"] = dump(network_policy(values, ctx))
    if values["backendDiscovery"]["enabled"]:
        files["serviceaccount.yaml"] = dump(service_account(values, ctx))
        files["role.yaml"] = dump(discovery_role(values, ctx))
        files["rolebinding.yaml"] = dump(discovery_role_binding(values, ctx))
    return {k: header + text for k, text in files.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-f", "--values", action="append", default=[],
                   help="values file merged over the chart's values.yaml (repeatable, like helm -f)")
    p.add_argument("--release", default="scg", help="release name (default scg)")
    p.add_argument("--namespace", default="scg", help="namespace of every object (default scg)")
    p.add_argument("--out", default=os.path.join(HERE, "k8s"), help="output directory (default deploy/k8s)")
    args = p.parse_args()
    files = render(load_values(args.values), args.release, args.namespace)
    os.makedirs(args.out, exist_ok=True)
    for old in os.listdir(args.out):  # manifests this script wrote before and no longer renders
        path = os.path.join(args.out, old)
        if old.endswith(".yaml") and old not in files:
            with open(path) as f:
                if f.readline().startswith("# Generated by deploy/render.py"):
                    os.remove(path)
    for name, text in files.items():
        with open(os.path.join(args.out, name), "w") as f:
            f.write(text)
    print(f"render.py: wrote {len(files)} manifests to {args.out}")


if __name__ == "__main__":
    main()
