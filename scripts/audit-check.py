#!/usr/bin/env python3
# Usage: scripts/audit-check.py --calls N [--tool NAME] [--id-base B] FILE
#
# Checks an --audit-log file written during a fault run (scripts/fault.sh --audit): every call
# id B..B+N-1 of tool NAME (default slow_counter; B default 1000000, the loadtest's
# CALL_ID_BASE) has exactly one line whose outcome is `result` (the run the client got its
# result from), its other lines are retries the server answered without running the call
# again (`refused` 409, `dedup`), and no line of the tool names another id or another outcome
# (no call cancelled, failed or unknown). Lines of other tools are ignored; `audit_dropped`
# lines fail the check (a drop is a gap).
#
# Prints `audit: N calls, R with exactly one result line, refused X, dedup Y, missing M,
# doubled D, other O, dropped P` and exits 0 only when R == N and M == D == O == P == 0.
import argparse
import collections
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(add_help=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--tool", default="slow_counter")
    parser.add_argument("--id-base", type=int, default=1_000_000)
    parser.add_argument("file")
    args = parser.parse_args()
    results = collections.Counter()
    outcomes = collections.Counter()
    other = []
    dropped = 0
    expected = set(range(args.id_base, args.id_base + args.calls))
    with open(args.file, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            entry = json.loads(line)
            if "audit_dropped" in entry:
                dropped += entry["audit_dropped"]
                continue
            if entry.get("tool") != args.tool:
                continue
            call_id, outcome = entry.get("id"), entry.get("outcome")
            outcomes[outcome] += 1
            if call_id not in expected:
                other.append(f"line {number}: id {call_id} is no call of the run")
            elif outcome == "result" and not entry.get("tool_error"):
                results[call_id] += 1
            elif outcome == "refused" and entry.get("status") == 409:
                pass
            elif outcome == "dedup":
                pass
            else:
                other.append(f"line {number}: id {call_id} ended {outcome} {entry.get('error_code', '')}")
    once = sum(1 for i in expected if results[i] == 1)
    missing = sum(1 for i in expected if results[i] == 0)
    doubled = sum(1 for i in expected if results[i] > 1)
    print(
        f"audit: {args.calls} calls, {once} with exactly one result line, "
        f"refused {outcomes['refused']}, dedup {outcomes['dedup']}, missing {missing}, "
        f"doubled {doubled}, other {len(other)}, dropped {dropped}"
    )
    for why in other[:10]:
        print(f"audit: {why}", file=sys.stderr)
    ok = once == args.calls and missing == doubled == len(other) == dropped == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
