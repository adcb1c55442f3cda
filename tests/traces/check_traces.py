"""Drives a tidemark with tracing on and checks what reached the OTLP receiver (scripts/traces.sh).

Scenario `bridge`: FRONT is a tidemark with `--tools demo --upstream UPSTREAM` (the upstream's
`greet` denied: the demo set has one) whose upstream is
a second tidemark (`--tools conformance`); both export to the receiver. One legacy session over
raw HTTP, every request with a client `traceparent` of one trace and a client span id of its
own: initialize, tools/list, tools/call echo (built in), tools/call test_simple_text (bridged),
tools/call of an unknown tool (a JSON-RPC error); then a ping with no traceparent, one with a
malformed traceparent, one with an unsampled one. Checks:
  - one SERVER span per request whose parent is that request's client span, in the client's
    trace, named `{mcp.method.name} {target}`, with mcp.method.name, jsonrpc.request.id,
    mcp.session.id (after initialize), mcp.protocol.version, network.transport,
    gen_ai.tool.name (tools/call), error.type and an ERROR status on the error;
  - the bridged call's CLIENT span is a child of its SERVER span, and the upstream tidemark's
    SERVER span is a child of that CLIENT span (the `traceparent` it was sent);
  - the ping without a traceparent, and the one with a malformed one, are root spans of new
    traces; the unsampled one left no span, on either tidemark;
  - the receiver decoded every export (GET /errors is empty).

Scenario `drops`: FRONT exports to an address that accepts and never answers, with
--otlp-queue-spans 2: 40 pings are all answered while the exporter hangs, and /metrics (METRICS)
counts the spans that did not fit in tidemark_trace_spans_dropped_total.

Usage: check_traces.py --scenario bridge --front URL --receiver http://127.0.0.1:PORT
       check_traces.py --scenario drops --front URL --metrics http://ADDR/metrics
Exit 0 when every check passed; each failure is printed.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

TRACE_ID = os.urandom(16).hex()
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        FAILURES.append(what)


def post(url, message, session=None, traceparent=None, version=None):
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session:
        headers["Mcp-Session-Id"] = session
    if version:
        headers["MCP-Protocol-Version"] = version
    if traceparent:
        headers["traceparent"] = traceparent
    request = urllib.request.Request(url, json.dumps(message).encode(), headers, method="POST")
    try:
        response = urllib.request.urlopen(request, timeout=30)
    except urllib.error.HTTPError as e:
        response = e
    body = response.read().decode()
    answer = None
    if response.headers.get("Content-Type", "").startswith("text/event-stream"):
        for line in body.splitlines():
            if line.startswith("data:") and line[5:].strip():
                data = json.loads(line[5:])
                if "id" in data and ("result" in data or "error" in data):
                    answer = data
    elif body.strip():
        answer = json.loads(body)
    return response.status, response.headers, answer


def client_span():
    return os.urandom(8).hex()


def spans_of(receiver):
    with urllib.request.urlopen(receiver + "/spans", timeout=10) as r:
        return json.loads(r.read())


def wait_for_spans(receiver, done, seconds=10):
    deadline = time.time() + seconds
    spans = spans_of(receiver)
    while not done(spans) and time.time() < deadline:
        time.sleep(0.2)
        spans = spans_of(receiver)
    return spans


def bridge(args):
    url = args.front
    version = "2025-06-18"
    sent = {}

    def call(name, message, session=None, sampled=True):
        span = client_span()
        flags = "01" if sampled else "00"
        status, headers, answer = post(url, message, session, f"00-{TRACE_ID}-{span}-{flags}",
                                       version if session else None)
        sent[name] = span
        return status, headers, answer

    status, headers, answer = call("initialize", {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {},
                   "clientInfo": {"name": "check_traces", "version": "1"}}})
    check(status == 200 and answer and "result" in answer, f"initialize answered ({status})")
    session = headers.get("Mcp-Session-Id")
    check(bool(session), "initialize gave a session id")
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session, None, version)
    status, _, answer = call("tools/list", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                             session)
    names = [t["name"] for t in (answer or {}).get("result", {}).get("tools", [])]
    check("echo" in names and "test_simple_text" in names, f"tools/list has both tools: {names}")
    status, _, answer = call("echo", {"jsonrpc": "2.0", "id": "call-3", "method": "tools/call",
                                      "params": {"name": "echo", "arguments": {"text": "hi"}}},
                             session)
    check(answer and "result" in answer, f"echo answered: {answer}")
    status, _, answer = call("bridged", {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                                         "params": {"name": "test_simple_text",
                                                    "arguments": {}}}, session)
    check(answer and "result" in answer, f"the bridged call answered: {answer}")
    status, _, answer = call("unknown", {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                                         "params": {"name": "no_such_tool", "arguments": {}}},
                             session)
    check(answer and "error" in answer, f"the unknown tool's call failed: {answer}")
    error_code = str((answer or {}).get("error", {}).get("code"))
    post(url, {"jsonrpc": "2.0", "id": 6, "method": "ping"}, session, None, version)
    malformed = f"00-{TRACE_ID.upper()}-{client_span()}-01"
    post(url, {"jsonrpc": "2.0", "id": 7, "method": "ping"}, session, malformed, version)
    status, _, answer = call("unsampled", {"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                                           "params": {"name": "test_simple_text",
                                                      "arguments": {}}}, session, sampled=False)
    check(answer and "result" in answer, "the unsampled bridged call answered")

    # initialize, tools/list, echo, bridged (+ CLIENT + upstream's SERVER, and the upstream's
    # own initialize/initialized/tools/list are roots there), unknown, 2 pings.
    def complete(spans):
        ids = {s["parentSpanId"] for s in spans}
        pings = [s for s in spans if s["name"] == "ping"]
        return all(sent[n] in ids for n in sent if n != "unsampled") and len(pings) >= 2 \
            and any(s["kind"] == 3 for s in spans) \
            and any(s["parentSpanId"] in {c["spanId"] for c in spans if c["kind"] == 3}
                    for s in spans)

    spans = wait_for_spans(args.receiver, complete)
    print(f"receiver holds {len(spans)} spans")
    by_parent = {}
    for s in spans:
        by_parent.setdefault(s["parentSpanId"], []).append(s)

    def server_span(name, expected_name, method):
        children = by_parent.get(sent[name], [])
        check(len(children) == 1, f"{name}: exactly one span is the child of the client's span "
                                  f"(got {len(children)})")
        if not children:
            return None
        s = children[0]
        a = s["attributes"]
        check(s["kind"] == 2, f"{name}: kind SERVER ({s['kind']})")
        check(s["traceId"] == TRACE_ID, f"{name}: in the client's trace")
        check(s["name"] == expected_name, f"{name}: span name {s['name']!r} == {expected_name!r}")
        check(a.get("mcp.method.name") == method, f"{name}: mcp.method.name {a.get('mcp.method.name')}")
        check(a.get("network.transport") == "tcp", f"{name}: network.transport tcp")
        check(a.get("mcp.protocol.version") == version, f"{name}: mcp.protocol.version")
        check(s["end"] >= s["start"] > 0, f"{name}: start and end times")
        check(s["resource"].get("service.name") == "tidemark", f"{name}: service.name")
        return s

    s = server_span("initialize", "initialize", "initialize")
    if s:
        check(s["attributes"].get("jsonrpc.request.id") == "1", "initialize: jsonrpc.request.id 1")
    s = server_span("tools/list", "tools/list", "tools/list")
    if s:
        check(s["attributes"].get("mcp.session.id") == session, "tools/list: mcp.session.id")
    s = server_span("echo", "tools/call echo", "tools/call")
    if s:
        a = s["attributes"]
        check(a.get("gen_ai.tool.name") == "echo", "echo: gen_ai.tool.name")
        check(a.get("jsonrpc.request.id") == "call-3", "echo: a string id, unquoted")
        check(s["status"]["code"] != 2, "echo: no ERROR status")
        check(not by_parent.get(s["spanId"]), "echo: a built-in tool makes no CLIENT span")
    bridged = server_span("bridged", "tools/call test_simple_text", "tools/call")
    if bridged:
        clients = [c for c in by_parent.get(bridged["spanId"], []) if c["kind"] == 3]
        check(len(clients) == 1, f"bridged: one CLIENT span under the request's ({len(clients)})")
        if clients:
            c = clients[0]
            check(c["traceId"] == TRACE_ID, "bridged CLIENT: in the client's trace")
            check(c["name"] == "tools/call test_simple_text", f"bridged CLIENT: name {c['name']!r}")
            check(c["attributes"].get("gen_ai.tool.name") == "test_simple_text",
                  "bridged CLIENT: gen_ai.tool.name")
            check(bridged["start"] <= c["start"] and c["end"] <= bridged["end"],
                  "bridged CLIENT: within the request's span")
            upstream = by_parent.get(c["spanId"], [])
            check(len(upstream) == 1 and upstream[0]["kind"] == 2,
                  "the upstream tidemark's SERVER span is the child of our CLIENT span "
                  "(the propagated traceparent)")
            if upstream:
                u = upstream[0]
                check(u["traceId"] == TRACE_ID, "upstream SERVER: in the client's trace")
                check(u["name"] == "tools/call test_simple_text", f"upstream SERVER: {u['name']!r}")
                check(bool(u["attributes"].get("mcp.session.id")),
                      "upstream SERVER: the bridge's upstream session id")
    s = server_span("unknown", "tools/call no_such_tool", "tools/call")
    if s:
        check(s["attributes"].get("error.type") == error_code,
              f"unknown: error.type {s['attributes'].get('error.type')} == {error_code}")
        check(s["status"]["code"] == 2, "unknown: ERROR status")
    pings = [s for s in spans if s["name"] == "ping"]
    check(len(pings) == 2, f"two ping spans ({len(pings)})")
    check(all(p["parentSpanId"] == "" and p["traceId"] != TRACE_ID for p in pings),
          "the pings without a (valid) traceparent are roots of new traces")
    check(not by_parent.get(sent["unsampled"]), "the unsampled request left no span")
    check(not [s for s in spans if s["traceId"] == TRACE_ID and s["kind"] == 3
               and s["parentSpanId"] not in {x["spanId"] for x in spans}],
          "every CLIENT span's parent was exported (none from the unsampled call)")
    with urllib.request.urlopen(args.receiver + "/errors", timeout=10) as r:
        errors = json.loads(r.read())
    check(errors == [], f"the receiver decoded every export ({errors[:3]})")


def drops(args):
    started = time.time()
    for i in range(40):
        status, _, answer = post(args.front, {"jsonrpc": "2.0", "id": i, "method": "initialize",
                                              "params": {"protocolVersion": "2025-06-18",
                                                         "capabilities": {},
                                                         "clientInfo": {"name": "d",
                                                                        "version": "1"}}})
        if status != 200:
            check(False, f"initialize {i} answered {status}")
            return
    elapsed = time.time() - started
    check(elapsed < 5, f"40 requests answered while the exporter hangs ({elapsed:.2f} s)")
    with urllib.request.urlopen(args.metrics, timeout=10) as r:
        text = r.read().decode()
    dropped = [line for line in text.splitlines()
               if line.startswith("tidemark_trace_spans_dropped_total ")]
    value = int(float(dropped[0].split()[1])) if dropped else -1
    # At most 2 queued + the exporter's first pop (the queue's 2) escaped the count.
    check(value >= 40 - 4, f"tidemark_trace_spans_dropped_total counts the overflow ({value})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--scenario", choices=["bridge", "drops"], required=True)
    parser.add_argument("--front", required=True)
    parser.add_argument("--receiver")
    parser.add_argument("--metrics")
    args = parser.parse_args()
    {"bridge": bridge, "drops": drops}[args.scenario](args)
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
