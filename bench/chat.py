#!/usr/bin/env python3
"""Chat-mode load benchmark: 200 concurrent sessions on one server and one folder, each
streaming a scripted 3-turn answer with tool calls, zero model latency; once with
checkpoints off (the chat path alone) and once on (chat mode's default), then 100 tasks
four at a time. RSS is followed after each burst (issue 18 §3 and §4).
Runs the chat_load example against picogent, both from the release build."""
import json, os, subprocess, sys

from report import TARGET, BIN, emit, table

LOAD = os.path.join(TARGET, "release/examples/chat_load")
N = os.environ.get("BENCH_SESSIONS", "200")


def load(*args):
    out = subprocess.run([LOAD, BIN, *args], capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    if not r["all_ok"]:
        sys.exit("some sessions did not get their full answer: " + out)
    return r


off = load(N)
on = load(N, "--checkpoints", "--settle=30")
seq = load("100", "--checkpoints", "--workers=4", "--settle=10")
ratio = on["wall_s"] / off["wall_s"]
rows = [
    (f"{off['sessions']} concurrent sessions, checkpoints off, total wall", "%.2f s" % off["wall_s"], f"{off['model_calls']} model calls, {2 * int(off['sessions'])} tool calls", ""),
    (f"{on['sessions']} concurrent sessions, checkpoints on, total wall", "%.2f s" % on["wall_s"], "%.1f× the checkpoints-off time; every run finished" % ratio, "≤ 3× off"),
    ("peak RSS (VmHWM), checkpoints off / on", "%.1f / %.1f MB" % (off["peak_rss_mb"], on["peak_rss_mb"]), "idle before the load: %.1f MB" % off["idle_rss_mb"], ""),
    ("RSS 30 s after the 200-session burst", "%.1f MB" % on["rss_each_second_mb"][29], "1 s after: %.1f MB; checkpoints on" % on["rss_each_second_mb"][0], "< 12 MB"),
    ("RSS 10 s after 100 chat tasks (4 at a time)", "%.1f MB" % seq["rss_each_second_mb"][9], "1 s after: %.1f MB; idle before: %.1f MB; checkpoints on" % (seq["rss_each_second_mb"][0], seq["idle_rss_mb"]), "< 10 MB"),
    ("last text frame → done, p50", "%.2f ms" % off["last_text_to_done_p50_ms"], "as the client sees it (checkpoints off); stands in for the model's last byte → done", ""),
    ("last text frame → done, p99", "%.2f ms" % off["last_text_to_done_p99_ms"], "", ""),
]
emit(table("Chat mode", "bench/chat.py", rows))
