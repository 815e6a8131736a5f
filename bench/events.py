#!/usr/bin/env python3
"""`/events` acknowledgement under concurrent load (issue 18 §5), side by side.

Starts the fake tracker and, for each binary, `picogent <agent dir>` over the HTTP
transport, then posts events with the compiled `events_load` client: S senders, each
on its own keep-alive connection, posting `task.cancelled` events (each is journaled and
synced before its answer, then a comment is queued in the outbox and posted to the
tracker, as the protocol asks) as fast as they are answered. 400 warm-up events first.

    python3 bench/events.py                       # this build, 50 senders, 2,000 events
    python3 bench/events.py --ab before=BIN after=BIN --runs 5 [--record]

With --ab the binaries take turns, run after run, so a change in the machine's load
touches both alike; the table gives each one's median over the runs.
"""
import json, os, statistics, subprocess, sys, tempfile, time

from agent import LOAD, start_agent
from report import BIN, emit, table

SENDERS = int(os.environ.get("BENCH_SENDERS", "50"))
TOTAL = int(os.environ.get("BENCH_EVENTS", "2000"))


def load(port, senders, total, prefix):
    out = subprocess.run([LOAD, str(port), "tracker-token", str(senders), str(total), prefix],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"events_load: {out.stderr.strip()}")
    r = json.loads(out.stdout)
    r["eps"] = total / r["wall_s"]
    return r


def run(binary):
    tmp = tempfile.mkdtemp(prefix="picogent-events-bench-")
    # No model is called: cancellations of unknown tasks start no run.
    tracker, _, port, daemon = start_agent(binary, tmp, "http://127.0.0.1:9")
    try:
        load(port, SENDERS, 400, "warm")
        return load(port, SENDERS, TOTAL, "load")
    finally:
        daemon.terminate()
        daemon.wait(timeout=40)
        tracker.terminate()


def main():
    args = sys.argv[1:]
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 3
    if "--ab" in args:
        named = [(n, os.path.abspath(b)) for n, b in
                 (a.split("=", 1) for a in args[args.index("--ab") + 1:] if "=" in a)]
    else:
        named = [("this build", BIN)]
    results = {name: [] for name, _ in named}
    for i in range(runs):
        for name, binary in named:
            r = run(binary)
            results[name].append(r)
            print(f"run {i + 1} {name}: p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, "
                  f"{r['eps']:.0f} events/s", file=sys.stderr, flush=True)
    med = lambda name, key: statistics.median(r[key] for r in results[name])
    base = named[0][0]
    rows = []
    for name, _ in named:
        rows.append((name, "%.2f ms" % med(name, "p50_ms"), "%.2f ms" % med(name, "p99_ms"),
                     "%.0f events/s" % med(name, "eps"),
                     "%.1f×" % (med(name, "eps") / med(base, "eps"))))
    command = "python3 bench/events.py " + " ".join(args)
    emit(table(f"/events under {SENDERS} concurrent senders ({TOTAL} events, median of {runs} runs)",
               "bench/events.py", rows,
               columns=("binary", "ack p50", "ack p99", "throughput", f"vs {base}"), command=command))


if __name__ == "__main__":
    main()
