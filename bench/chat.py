#!/usr/bin/env python3
"""Chat-mode load benchmark (issue: chat mode): 200 concurrent sessions on one server,
each streaming a scripted 3-turn answer with tool calls, zero model latency.
Runs target/release/examples/chat_load against target/release/picogent."""
import json, os, subprocess, sys, datetime, platform

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/picogent")
LOAD = os.path.join(ROOT, "target/release/examples/chat_load")
N = os.environ.get("BENCH_SESSIONS", "200")

out = subprocess.run([LOAD, BIN, N], capture_output=True, text=True, check=True).stdout
r = json.loads(out.strip().splitlines()[-1])
if not r["all_ok"]:
    sys.exit("some sessions did not get their full answer: " + out)
version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout.strip()
mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
rows = [
    (f"{r['sessions']} concurrent sessions, total wall", "%.2f s" % r["wall_s"], f"{r['model_calls']} model calls, {2 * int(r['sessions'])} tool calls", ""),
    ("peak RSS (VmHWM)", "%.1f MB" % r["peak_rss_mb"], "idle before the load: %.1f MB" % r["idle_rss_mb"], ""),
    ("last text frame → done, p50", "%.2f ms" % r["last_text_to_done_p50_ms"], "as the client sees it; stands in for the model's last byte → done", ""),
    ("last text frame → done, p99", "%.2f ms" % r["last_text_to_done_p99_ms"], "", ""),
]
lines = [f"## Chat mode ({datetime.date.today()}, {version})", "",
         f"Machine: {os.cpu_count()} cores, {mem_gib:.0f} GiB, {platform.platform()}. "
         "Command: `bash bench/run.sh --record` (this table: `bench/chat.py`).", "",
         "| measure | value | note | target |", "|---|---|---|---|"]
lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
table = "\n".join(lines) + "\n"
print(table)
if "--record" in sys.argv:
    path = os.path.join(ROOT, "bench/RESULTS.md")
    old = open(path).read()
    head, sep, rest = old.partition("\n## ")
    open(path, "w").write(head.rstrip() + "\n\n" + table + ("\n## " + rest if sep else ""))
