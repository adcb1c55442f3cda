"""Checks what the Kubernetes schemas cannot: that the manifests deploy/kubernetes/render
prints hang together (docs/deployment.md, "Kubernetes").

Usage: check.py MANIFEST [--toml-out FILE] [--haproxy-out FILE]

Checked: the StatefulSet's replicas are exactly the nodes the balancer lists (tidemark-K at
--node-id K, through the headless Service, on the MCP port, checked on the admin port); the
pod's node id comes from its pod-index; the TOML's listen and metrics-listen ports are the
container's ports; /healthz and /readyz probe the admin port; terminationGracePeriodSeconds is
the TOML's drain-secs + 10; the Secret is mounted where request-state-key-file points; each
PodDisruptionBudget selects its pods and lets one go at a time; the client Service reaches the
balancer. Writes the TOML and haproxy.cfg out for the next steps. Exit 1 with every failed
check named.
"""

import re
import sys

import yaml

DRAIN_MARGIN_SECS = 10


def main(argv):
    path, outs = argv[1], dict(zip(argv[2::2], argv[3::2]))
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    failures = []

    def check(ok, what):
        if not ok:
            failures.append(what)

    sts = by[("StatefulSet", "tidemark")]
    pod = sts["spec"]["template"]["spec"]
    container = pod["containers"][0]
    toml = by[("ConfigMap", "tidemark-config")]["data"]["tidemark.toml"]
    cfg = dict(re.findall(r'^([a-z-]+) = "?([^"\n]*)"?$', toml, re.M))
    haproxy = by[("ConfigMap", "tidemark-haproxy")]["data"]["haproxy.cfg"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    namespace = sts["metadata"]["namespace"]

    check(cfg.get("listen", "").endswith(f":{ports['mcp']}"), "listen is the mcp port")
    check(cfg.get("metrics-listen", "").endswith(f":{ports['admin']}"), "metrics-listen is the admin port")
    drain = int(cfg.get("drain-secs", "30"))
    check(pod["terminationGracePeriodSeconds"] == drain + DRAIN_MARGIN_SECS,
          f"grace = drain-secs {drain} + {DRAIN_MARGIN_SECS}")
    probes = {k: container[k]["httpGet"] for k in ("livenessProbe", "readinessProbe")}
    check(probes["livenessProbe"] == {"path": "/healthz", "port": "admin"}, "liveness on /healthz")
    check(probes["readinessProbe"] == {"path": "/readyz", "port": "admin"}, "readiness on /readyz")
    env = {e["name"]: e for e in container["env"]}
    check(env["TIDEMARK_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"]
          == "metadata.labels['apps.kubernetes.io/pod-index']", "node id from the pod index")
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    check(cfg.get("request-state-key-file", "").startswith(mounts["secrets"] + "/"),
          "request-state-key-file inside the Secret's mount")
    check(env["TIDEMARK_CONFIG"]["value"] == mounts["config"], "TIDEMARK_CONFIG is the mounted TOML")
    secret = [v for v in pod["volumes"] if v["name"] == "secrets"][0]["secret"]
    check(secret["secretName"] == "tidemark-secrets", "the Secret tidemark-secrets")

    # The balancer lists exactly the StatefulSet's pods, in every backend that balances.
    want = [f"tidemark-{k}.tidemark-nodes.{namespace}.svc." for k in range(sts["spec"]["replicas"])]
    for backend in ("pool", "keyed"):
        block = haproxy.split(f"\nbackend {backend}\n", 1)[1].split("\nbackend ", 1)[0]
        servers = re.findall(r"server node([0-9a-f]{2}) (\S+):(\d+) id (\d+) check port (\d+)", block)
        check(len(servers) == len(want), f"{backend}: {len(servers)} servers for {len(want)} pods")
        for k, (hexid, host, port, sid, admin) in enumerate(servers[: len(want)]):
            check(int(hexid, 16) == k and int(sid) == k + 1, f"{backend}: node{hexid} is pod {k}")
            check(host.startswith(want[k]), f"{backend}: node{hexid} at {host}")
            check(int(port) == ports["mcp"] and int(admin) == ports["admin"], f"{backend}: node{hexid} ports")
    check("resolvers system" in haproxy and "parse-resolv-conf" in haproxy, "names resolved at run time")
    check(by[("Service", "tidemark-nodes")]["spec"]["clusterIP"] == "None", "headless node Service")
    check(sts["spec"]["serviceName"] == "tidemark-nodes", "pods named through tidemark-nodes")
    durable = "durable" in cfg
    check(durable == ("backup" in haproxy), "backup peers exactly when durable")

    for name, component in (("tidemark", "node"), ("tidemark-haproxy", "balancer")):
        pdb = by[("PodDisruptionBudget", name)]["spec"]
        check(pdb["maxUnavailable"] == 1, f"{name}: one pod at a time")
        check(pdb["selector"]["matchLabels"].get("app.kubernetes.io/component") == component,
              f"{name}: the PDB selects the {component} pods")
    svc = by[("Service", "tidemark")]["spec"]
    check(svc["selector"].get("app.kubernetes.io/component") == "balancer", "clients reach the balancer")
    balancer = by[("Deployment", "tidemark-haproxy")]["spec"]["template"]["spec"]["containers"][0]
    bind = re.search(r"bind \S+:(\d+)", haproxy)
    check(bind and int(bind.group(1)) == balancer["ports"][0]["containerPort"], "balancer port")

    if "--toml-out" in outs:
        open(outs["--toml-out"], "w").write(toml)
    if "--haproxy-out" in outs:
        open(outs["--haproxy-out"], "w").write(haproxy)
    for f in failures:
        print(f"check.py: {path}: FAILED: {f}")
    print(f"check.py: {path}: {sts['spec']['replicas']} node(s), durable={durable}, "
          f"{len(failures)} failed check(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
