"""A small OTLP/HTTP trace receiver for scripts/traces.sh.

Every POST to /v1/traces is decoded into the official `ExportTraceServiceRequest` message of the
`opentelemetry-proto` package (PyPI): `application/x-protobuf` with ParseFromString,
`application/json` with protobuf's json_format in strict mode (an unknown or misspelt field is a
decode error), after the one deviation OTLP/JSON makes from the protobuf JSON mapping is undone
(trace and span ids are hex there, base64 in protobuf JSON). A body that does not decode is
answered 400 and listed at GET /errors. The decoded spans are listed at GET /spans as JSON:
hex ids, name, kind (the enum's number), attributes as {key: value}, status code and message,
and the resource's attributes.

With --hang it reads nothing and answers nothing (a collector that stalls): for the drop test.

Usage: python otlp_receiver.py [--hang]  (prints "otlp receiver listening on
http://127.0.0.1:PORT/v1/traces" as its first line, then serves until killed)
"""

import base64
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

HANG = "--hang" in sys.argv[1:]
SPANS = []
ERRORS = []
LOCK = threading.Lock()

ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def hex_ids_to_base64(node):
    """OTLP/JSON writes ids as hex; the protobuf JSON mapping of `bytes` is base64."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ID_FIELDS and isinstance(value, str):
                node[key] = base64.b64encode(bytes.fromhex(value)).decode()
            else:
                hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_ids_to_base64(item)


def any_value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


def flatten(request):
    out = []
    for resource_spans in request.resource_spans:
        resource = {a.key: any_value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                out.append({
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "start": span.start_time_unix_nano,
                    "end": span.end_time_unix_nano,
                    "attributes": {a.key: any_value(a.value) for a in span.attributes},
                    "status": {"code": span.status.code, "message": span.status.message},
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                })
    return out


class Handler(BaseHTTPRequestHandler):
    def log_message(self, fmt, *args):
        sys.stderr.write("otlp-receiver: " + fmt % args + "\n")

    def reply(self, status, body, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if HANG:
            time.sleep(3600)
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        request = trace_service_pb2.ExportTraceServiceRequest()
        try:
            if self.path != "/v1/traces":
                raise ValueError(f"unexpected path {self.path}")
            if content_type == "application/x-protobuf":
                request.ParseFromString(body)
            elif content_type == "application/json":
                document = json.loads(body)
                hex_ids_to_base64(document)
                json_format.ParseDict(document, request, ignore_unknown_fields=False)
            else:
                raise ValueError(f"unexpected Content-Type {content_type!r}")
        except Exception as e:  # noqa: BLE001 - every decode failure is the exporter's bug
            with LOCK:
                ERRORS.append(f"{type(e).__name__}: {e}")
            self.reply(400, json.dumps({"error": str(e)}).encode())
            return
        spans = flatten(request)
        with LOCK:
            SPANS.extend(spans)
        response = trace_service_pb2.ExportTraceServiceResponse()
        if content_type == "application/x-protobuf":
            self.reply(200, response.SerializeToString(), "application/x-protobuf")
        else:
            self.reply(200, json_format.MessageToJson(response).encode())

    def do_GET(self):
        with LOCK:
            if self.path == "/spans":
                body = json.dumps(SPANS)
            elif self.path == "/errors":
                body = json.dumps(ERRORS)
            else:
                self.reply(404, b"{}")
                return
        self.reply(200, body.encode())


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    port = server.server_address[1]
    print(f"otlp receiver listening on http://127.0.0.1:{port}/v1/traces", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
