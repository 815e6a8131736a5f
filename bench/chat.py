#!/usr/bin/env python3
"""Chat-mode load benchmark (issue: chat mode): 200 concurrent sessions on one server,
each streaming a scripted 3-turn answer with tool calls, zero model latency.
Runs target/release/examples/chat_load against target/release/picogent."""
import json, os, subprocess, sys

from report import emit, table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target/release/picogent")
LOAD = os.path.join(ROOT, "target/release/examples/chat_load")
N = os.environ.get("BENCH_SESSIONS", "200")

out = subprocess.run([LOAD, BIN, N], capture_output=True, text=True, check=True).stdout
r = json.loads(out.strip().splitlines()[-1])
if not r["all_ok"]:
    sys.exit("some sessions did not get their full answer: " + out)
rows = [
    (f"{r['sessions']} concurrent sessions, total wall", "%.2f s" % r["wall_s"], f"{r['model_calls']} model calls, {2 * int(r['sessions'])} tool calls", ""),
    ("peak RSS (VmHWM)", "%.1f MB" % r["peak_rss_mb"], "idle before the load: %.1f MB" % r["idle_rss_mb"], ""),
    ("last text frame → done, p50", "%.2f ms" % r["last_text_to_done_p50_ms"], "as the client sees it; stands in for the model's last byte → done", ""),
    ("last text frame → done, p99", "%.2f ms" % r["last_text_to_done_p99_ms"], "", ""),
]
emit(table("Chat mode", "bench/chat.py", rows))
