"""Checks of scripts/browser.sh's `status` run: the admin listener's /status page as headless
Chromium rendered it (its --dump-dom output) against a /metrics scrape of the same moment, and
Chromium's NetLog of a page left open (what the page itself loaded).

  status_check.py figures DOM METRICS [--want NAME{LABELS}>=N ...]
      every element with data-metric must show the sum of the samples of that family whose
      labels include its data-labels; each --want must hold for the figure shown. Prints
      `N figures match /metrics; <wanted figures>` or the mismatches (exit 1).
  status_check.py netlog NETLOG PAGE_URL --min-loads N
      the page (requests Chromium made on behalf of PAGE_URL's origin) loaded nothing but
      PAGE_URL itself, and did so at least N times (its meta refresh), the first load included.
"""

import argparse
import json
import re
import sys
from html.parser import HTMLParser
from urllib.parse import urlsplit


class Figures(HTMLParser):
    """The (data-metric, data-labels, text) of every figure of the page, and any reference to
    another resource (src, href, srcset, a CSS url()) it contains."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.figures = []
        self.references = []
        self._open = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for name in ("src", "href", "srcset", "poster", "data", "action"):
            if name in attrs:
                self.references.append(f"<{tag} {name}={attrs[name]!r}>")
        if "url(" in (attrs.get("style") or ""):
            self.references.append(f"<{tag} style={attrs['style']!r}>")
        if "data-metric" in attrs:
            self._open = [attrs["data-metric"], attrs.get("data-labels", ""), ""]

    def handle_data(self, data):
        if self._open is not None:
            self._open[2] += data

    def handle_endtag(self, tag):
        if self._open is not None:
            self.figures.append(tuple(self._open))
            self._open = None


def split_labels(labels):
    """The labels of a rendered label set; commas inside quoted values do not split."""
    return re.findall(r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*"', labels)


def parse_samples(text):
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, _, value = line.rpartition(" ")
        name, _, labels = series.partition("{")
        samples.append((name, split_labels(labels.rstrip("}")), value))
    return samples


def total(samples, name, labels):
    wanted = split_labels(labels)
    return sum(
        int(float(value))
        for sample_name, sample_labels, value in samples
        if sample_name == name and all(w in sample_labels for w in wanted)
    )


def figures(args):
    page = Figures()
    page.feed(open(args.dom, encoding="utf-8").read())
    samples = parse_samples(open(args.metrics, encoding="utf-8").read())
    errors = []
    if page.references:
        errors.append(f"the page references other resources: {page.references}")
    if not page.figures:
        errors.append("no data-metric figures in the page")
    shown = {}
    for name, labels, text in page.figures:
        expected = total(samples, name, labels)
        if not any(s[0] == name for s in samples):
            errors.append(f"{name}{{{labels}}}: shown {text!r}, no such family in /metrics")
        elif text.strip() != str(expected):
            errors.append(f"{name}{{{labels}}}: shown {text.strip()!r}, /metrics says {expected}")
        shown[f"{name}{{{labels}}}" if labels else name] = text.strip()
    met = []
    for want in args.want:
        key, _, minimum = want.partition(">=")
        value = shown.get(key)
        if value is None:
            errors.append(f"the page shows no figure {key}")
        elif int(value) < int(minimum):
            errors.append(f"{key} is {value}, wanted at least {minimum}")
        else:
            met.append(f"{key}={value}")
    if errors:
        print("; ".join(errors))
        return 1
    print(f"{len(page.figures)} figures match /metrics; {', '.join(met)}")
    return 0


def parse_unfinished_netlog(text):
    """A NetLog as Chromium left it when stopped.

    Chromium writes one event per line and closes the events array only on a clean exit; a
    SIGTERM can land anywhere. So the array may be open and the last line cut: drop cut lines
    (each a single event, or the polledData epilogue) until the rest closes into JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    lines = text.rstrip().split("\n")
    for _ in range(3):
        if len(lines) < 3:
            break
        kept = "\n".join(lines).rstrip().rstrip(",")
        # Cut among the events, the array is open; cut in the polledData epilogue, after the
        # events line, it is closed.
        for closing in ("]}", "}"):
            try:
                return json.loads(kept + closing)
            except json.JSONDecodeError:
                pass
        lines.pop()
    raise ValueError("the NetLog is cut before its events, or not JSON")


def netlog(args):
    text = open(args.netlog, encoding="utf-8").read()
    log = parse_unfinished_netlog(text)
    kinds = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    parts = urlsplit(args.page)
    origin = f"{parts.scheme}://{parts.netloc}"
    loads, others = 0, []
    for event in log["events"]:
        if kinds.get(event["type"]) != "URL_REQUEST_START_JOB" or "params" not in event:
            continue
        url, initiator = event["params"].get("url", ""), event["params"].get("initiator", "")
        # The page's own requests: its first navigation (to PAGE_URL), then whatever it
        # initiated (its reloads, and any resource it tried, wherever from). The browser's own
        # background requests have no initiating origin and are not the page's.
        ours = initiator == origin or urlsplit(url).netloc == parts.netloc
        if not ours:
            continue
        if url == args.page:
            loads += 1
        else:
            others.append(url)
    if others:
        print(f"the page loaded other resources: {others}")
        return 1
    if loads < args.min_loads:
        print(f"{loads} loads of {args.page}, wanted at least {args.min_loads} (no refresh?)")
        return 1
    print(f"{loads} loads of the page, nothing else")
    return 0


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    f = sub.add_parser("figures")
    f.add_argument("dom")
    f.add_argument("metrics")
    f.add_argument("--want", action="append", default=[])
    n = sub.add_parser("netlog")
    n.add_argument("netlog")
    n.add_argument("page")
    n.add_argument("--min-loads", type=int, default=1)
    args = parser.parse_args()
    return figures(args) if args.command == "figures" else netlog(args)


if __name__ == "__main__":
    sys.exit(main())
