#!/usr/bin/env python3
"""The page server of scripts/browser.sh: serves the bundled browser page from its own origin
(another port than tidemark's) and takes the page's verdicts.

Usage: page_server.py --site DIR --reports DIR [--port N]

GET serves files of --site (index.html, bundle.js); POST /report?run=NAME stores the body (at most
REPORT_BYTES_MAX bytes) as --reports/NAME.json. Listens on 127.0.0.1 (port 0: the kernel picks)
and prints `page server listening on http://127.0.0.1:PORT/` as its first stdout line. Runs until
killed.
"""

import argparse
import functools
import http.server
import pathlib
import re
import sys
import urllib.parse

# A report is a small JSON verdict; anything larger is refused (the page is ours, but a bound
# costs nothing).
REPORT_BYTES_MAX = 1024 * 1024
RUN_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


class Handler(http.server.SimpleHTTPRequestHandler):
    reports: pathlib.Path

    def do_POST(self):  # noqa: N802 (http.server's naming)
        url = urllib.parse.urlsplit(self.path)
        run = urllib.parse.parse_qs(url.query).get("run", [""])[0]
        length = int(self.headers.get("Content-Length") or 0)
        if url.path != "/report" or not RUN_NAME.match(run) or length > REPORT_BYTES_MAX:
            self.send_error(400)
            return
        (self.reports / f"{run}.json").write_bytes(self.rfile.read(length))
        self.send_response(204)
        self.end_headers()

    def end_headers(self):
        # The page and its bundle change between runs of the script: never from a cache.
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        sys.stderr.write("page server: " + (format % args) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", required=True, type=pathlib.Path)
    parser.add_argument("--reports", required=True, type=pathlib.Path)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    args.reports.mkdir(parents=True, exist_ok=True)
    Handler.reports = args.reports
    handler = functools.partial(Handler, directory=str(args.site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), handler)
    print(f"page server listening on http://127.0.0.1:{server.server_address[1]}/", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
