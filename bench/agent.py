#!/usr/bin/env python3
"""Agent-mode benchmarks (issue: agent mode).

Starts the scripted model server and the fake tracker (the tests' own, built as
examples), then `picogent <agent dir>` over the HTTP transport, and measures:
1. idle RSS of the daemon after registration;
2. `/events` acknowledgement latency for 1,000 task.assigned events posted one after
   another by a keep-alive client on loopback (each answer comes after the journal write
   and its fsync); the runs they start go on at the same time;
3. RSS after all 1,000 tasks were worked and reported.
"""
import http.client, json, os, socket, statistics, subprocess, sys, tempfile, time, shutil

from report import BIN, TARGET, emit, table

LLM = os.path.join(TARGET, "release/examples/scripted_llm")
TRACKER = os.path.join(TARGET, "release/examples/fake_tracker")
LOAD = os.path.join(TARGET, "release/examples/events_load")
EVENTS = int(os.environ.get("BENCH_EVENTS", "1000"))


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def get_json(addr, path):
    host, port = addr.rsplit(":", 1)
    c = http.client.HTTPConnection(host, int(port), timeout=5)
    c.request("GET", path)
    return json.loads(c.getresponse().read())


SENDERS = 50
CONC_EVENTS = 2000


def pct(lat_ms, q):
    s = sorted(lat_ms)
    return s[min(len(s) - 1, int(q * len(s)))]


def events_load(port, senders, total, prefix):
    """`total` task.cancelled events (acknowledged and journaled, no work queued) from
    `senders` connections at once, posted by the compiled `events_load` example (a
    Python client's threads would share one interpreter lock and time each other's
    waits): {p50_ms, p99_ms, max_ms, wall_s}."""
    out = subprocess.run([LOAD, str(port), "tracker-token", str(senders), str(total), prefix],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"events_load: {out.stderr.strip()}")
    return json.loads(out.stdout)


def start_agent(binary, tmp, base_url, **extra):
    """The fake tracker and `picogent <agent dir>` over HTTP callbacks, registered:
    (tracker, its stats address, the daemon's port, daemon). The caller stops both."""
    tracker = subprocess.Popen([TRACKER], stdout=subprocess.PIPE, text=True)
    tracker_addr = tracker.stdout.readline().split()[-1]
    stats_addr = tracker.stdout.readline().split()[-1]
    home = os.path.join(tmp, "agent")
    os.makedirs(home)
    port = free_port()
    json.dump({"name": "Bench", "slug": "bench", "tracker_url": f"http://{tracker_addr}",
               "listen_port": port, "provider": "anthropic", "base_url": base_url, **extra},
              open(os.path.join(home, "agent.json"), "w"))
    env = {"PATH": os.environ["PATH"], "HOME": tmp, "AGENT_TOKEN": "tracker-token",
           "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"}
    daemon = None
    try:
        daemon = subprocess.Popen([binary, home], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(tmp, "daemon.log"), "w"))
        deadline = time.time() + 20
        while get_json(stats_addr, "/")["register"] < 1:
            if time.time() > deadline:
                raise RuntimeError(f"{binary}: the daemon did not register")
            time.sleep(0.05)
    except BaseException:
        if daemon:
            daemon.terminate()
        tracker.terminate()
        raise
    return tracker, stats_addr, port, daemon


def main():
    tmp = tempfile.mkdtemp(prefix="picogent-agent-bench-")
    script = os.path.join(tmp, "script.json")
    json.dump([{"text": "done"}], open(script, "w"))
    llm = subprocess.Popen([LLM, script], stdout=subprocess.PIPE, text=True)
    llm_addr = llm.stdout.readline().split()[-1]
    try:
        tracker, stats_addr, port, daemon = start_agent(BIN, tmp, f"http://{llm_addr}",
                                                        max_concurrent_tasks=4)
    except BaseException:
        llm.terminate()
        raise
    try:
        time.sleep(1.0)
        idle = rss_mb(daemon.pid)

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        lat = []
        for i in range(EVENTS):
            body = json.dumps({"id": f"evt_{i}", "type": "task.assigned",
                               "data": {"task": {"id": f"t_{i}", "title": f"Task {i}"}}})
            t0 = time.perf_counter()
            conn.request("POST", "/events", body, {"Authorization": "Bearer tracker-token",
                                                   "Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            lat.append(time.perf_counter() - t0)
            if resp.status != 202:
                sys.exit(f"event {i}: HTTP {resp.status}")
        t_posted = time.time()
        while get_json(stats_addr, "/")["reviews"] < EVENTS:
            if time.time() > t_posted + 300:
                sys.exit("not every task was reported")
            time.sleep(0.1)
        all_done = time.time() - t_posted
        time.sleep(1.0)
        after = rss_mb(daemon.pid)
        seq = events_load(port, 1, CONC_EVENTS // 4, "seq")
        conc = events_load(port, SENDERS, CONC_EVENTS, "conc")
    finally:
        daemon.terminate()
        daemon.wait(timeout=40)
        llm.terminate()
        tracker.terminate()
    lat_ms = sorted(x * 1000 for x in lat)
    p = lambda q: lat_ms[min(len(lat_ms) - 1, int(q * len(lat_ms)))]
    rows = [
        ("idle RSS after registration", "%.1f MB" % idle, "VmRSS, 1 s after registering", "≤ 10 MB"),
        (f"/events ack latency p50 ({EVENTS} events)", "%.2f ms" % p(0.50), "journal write + fsync included", ""),
        (f"/events ack latency p99 ({EVENTS} events)", "%.2f ms" % p(0.99), "max %.2f ms" % lat_ms[-1], "≤ 5 ms"),
        (f"all {EVENTS} tasks worked and reported", "%.1f s" % all_done, "after the last event was acked; 4 at a time", ""),
        (f"RSS after {EVENTS} tasks", "%.1f MB" % after, "VmRSS, 1 s after the last report", ""),
        (f"/events ack p99, {SENDERS} concurrent senders ({CONC_EVENTS} events)", "%.2f ms" % conc["p99_ms"],
         "p50 %.2f ms, max %.2f ms; journal group commit" % (conc["p50_ms"], conc["max_ms"]), "≤ 5 ms"),
        (f"/events throughput, {SENDERS} concurrent senders", "%.0f events/s" % (CONC_EVENTS / conc["wall_s"]),
         "one sender: %.0f events/s (p99 %.2f ms); %.1f×" % (
             (CONC_EVENTS // 4) / seq["wall_s"], seq["p99_ms"],
             (CONC_EVENTS / conc["wall_s"]) / ((CONC_EVENTS // 4) / seq["wall_s"])),
         "≥ 5× the build before group commit (`bench/events.py --ab`)"),
    ]
    emit(table("Agent mode", "bench/agent.py", rows))


if __name__ == "__main__":
    main()
