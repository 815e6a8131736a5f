#!/usr/bin/env python3
"""Fleet mode (issue 39): workers sharing one PostgreSQL store (bench/fleet.sh starts a
throwaway server and sets PICOGENT_TEST_PG_URL).

1. Tasks per minute with 1, 2 and 3 workers on this machine: the scripted model answers
   each call after a fixed think time (MODEL_MS), so the workers wait as they would on
   a real model; each worker runs max_concurrent_tasks=2; TASKS task.assigned events
   are posted round-robin to the workers, and the clock stops at the last review.
2. /events acknowledgement (task.cancelled events, each committed before its answer)
   p50/p99 with the PostgreSQL store against the file store, one sender and 50.
3. Each worker's idle RSS.
"""
import json, os, statistics, subprocess, sys, tempfile, time

import pgdb
from agent import LLM, LOAD, TRACKER, free_port, get_json, rss_mb
from report import BIN, emit, table

TASKS = int(os.environ.get("BENCH_FLEET_TASKS", "60"))
MODEL_MS = int(os.environ.get("BENCH_MODEL_MS", "1000"))
PER_WORKER = 2


def start_workers(n, tmp, tracker_addr, llm_addr, store):
    workers = []
    for i in range(n):
        home = os.path.join(tmp, f"w{i}", "agent")
        os.makedirs(home)
        port = free_port()
        cfg = {"name": "Bench", "slug": "bench", "tracker_url": f"http://{tracker_addr}",
               "listen_port": port, "provider": "anthropic", "base_url": f"http://{llm_addr}",
               "max_concurrent_tasks": PER_WORKER, "sandbox": "off"}
        if store:
            cfg["store"] = store
        json.dump(cfg, open(os.path.join(home, "agent.json"), "w"))
        env = {"PATH": os.environ["PATH"], "HOME": os.path.join(tmp, f"w{i}"),
               "AGENT_TOKEN": "tracker-token", "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"}
        p = subprocess.Popen([BIN, home], env=env, cwd=os.path.join(tmp, f"w{i}"),
                             stdout=subprocess.DEVNULL,
                             stderr=open(os.path.join(tmp, f"w{i}.log"), "w"))
        workers.append((p, port))
    return workers


def wait_registered(stats_addr, n):
    deadline = time.time() + 30
    while get_json(stats_addr, "/")["register"] < n:
        if time.time() > deadline:
            sys.exit("the workers did not register")
        time.sleep(0.05)


def post(port, body):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/events", json.dumps(body), {"Authorization": "Bearer tracker-token",
                                                    "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    if r.status != 202:
        sys.exit(f"HTTP {r.status}")


def throughput(n):
    """Tasks per minute of `n` workers on a fresh database."""
    tmp = tempfile.mkdtemp(prefix=f"picogent-fleet-{n}-")
    store = pgdb.database()
    script = os.path.join(tmp, "script.json")
    json.dump([{"text": "done"}], open(script, "w"))
    llm = subprocess.Popen([LLM, script, "--per-conversation", "--latency-ms", str(MODEL_MS)],
                           stdout=subprocess.PIPE, text=True)
    llm_addr = llm.stdout.readline().split()[-1]
    tracker = subprocess.Popen([TRACKER], stdout=subprocess.PIPE, text=True)
    tracker_addr = tracker.stdout.readline().split()[-1]
    stats_addr = tracker.stdout.readline().split()[-1]
    workers = start_workers(n, tmp, tracker_addr, llm_addr, store)
    try:
        wait_registered(stats_addr, n)
        time.sleep(1.0)
        idle = [rss_mb(p.pid) for p, _ in workers]
        t0 = time.time()
        for i in range(TASKS):
            _, port = workers[i % n]
            post(port, {"id": f"e{i}", "type": "task.assigned",
                        "data": {"task": {"id": f"t{i}", "title": f"Task {i}"}}})
        while get_json(stats_addr, "/")["reviews"] < TASKS:
            if time.time() > t0 + 600:
                sys.exit("not every task was reported")
            time.sleep(0.05)
        wall = time.time() - t0
        reviews = get_json(stats_addr, "/")["reviews"]
    finally:
        for p, _ in workers:
            p.terminate()
        for p, _ in workers:
            p.wait(timeout=60)
        llm.terminate()
        tracker.terminate()
    if reviews != TASKS:
        sys.exit(f"{reviews} reviews for {TASKS} tasks: a task was reported twice")
    return TASKS / wall * 60, idle


def acks(store, senders, total):
    """/events ack p50/p99 of one worker on `store` (None: the file store)."""
    tmp = tempfile.mkdtemp(prefix="picogent-fleet-acks-")
    tracker = subprocess.Popen([TRACKER], stdout=subprocess.PIPE, text=True)
    tracker_addr = tracker.stdout.readline().split()[-1]
    stats_addr = tracker.stdout.readline().split()[-1]
    workers = start_workers(1, tmp, tracker_addr, "127.0.0.1:9", store)
    try:
        wait_registered(stats_addr, 1)
        port = workers[0][1]
        subprocess.run([LOAD, str(port), "tracker-token", str(senders), "200", "warm"],
                       capture_output=True, check=True, timeout=300)
        out = subprocess.run([LOAD, str(port), "tracker-token", str(senders), str(total), "load"],
                             capture_output=True, text=True, check=True, timeout=300)
        return json.loads(out.stdout)
    finally:
        workers[0][0].terminate()
        workers[0][0].wait(timeout=60)
        tracker.terminate()


def main():
    rates, idles = {}, []
    for n in (1, 2, 3):
        rate, idle = throughput(n)
        rates[n] = rate
        idles += idle
        print(f"{n} worker(s): {rate:.0f} tasks/min", file=sys.stderr, flush=True)
    rows = [(f"{n} worker(s)", "%.0f tasks/min" % rates[n], "%.2f×" % (rates[n] / rates[1]),
             "≥ 2.5× with 3" if n == 3 else "") for n in (1, 2, 3)]
    note = (f"\n{TASKS} tasks per run, posted round-robin; the model answers every call after "
            f"{MODEL_MS} ms; max_concurrent_tasks={PER_WORKER} per worker; sandbox off (its cost is "
            f"measured in `Sandbox cost`). Every task was reported in review exactly once.\n")
    emit(table(f"Fleet: tasks per minute, 1–3 workers on one PostgreSQL", "bench/fleet.py", rows,
               columns=("workers", "throughput", "vs one", "target"), command="bash bench/fleet.sh --record")
         + note)
    rows = []
    for senders, total in ((1, 500), (50, 2000)):
        runs = {"files": [], "postgres": []}
        for _ in range(3):
            runs["files"].append(acks(None, senders, total))
            runs["postgres"].append(acks(pgdb.database(), senders, total))
        med = lambda k, key: statistics.median(r[key] for r in runs[k])
        for k in ("files", "postgres"):
            rows.append((f"{k}, {senders} sender(s)", "%.2f ms" % med(k, "p50_ms"), "%.2f ms" % med(k, "p99_ms"),
                         "%.0f events/s" % (total / med(k, "wall_s")),
                         "%.2f×" % (med(k, "p99_ms") / med("files", "p99_ms")) if k == "postgres" else ""))
    emit(table("Fleet: /events acknowledgement, PostgreSQL store against file store", "bench/fleet.py", rows,
               columns=("store", "ack p50", "ack p99", "throughput", "p99 vs files (target ≤ 2×)"),
               command="bash bench/fleet.sh --record")
         + "\nMedians of 3 runs; task.cancelled events for unknown tasks (committed, answered, one comment "
           "queued each). PostgreSQL 15 on this machine, fsync on.\n")
    rows = [("worker idle RSS", "%.1f MB" % statistics.median(idles),
             "median of %d workers, 1 s after registering (min %.1f, max %.1f)" % (len(idles), min(idles), max(idles)),
             "")]
    emit(table("Fleet: a worker's idle memory", "bench/fleet.py", rows, command="bash bench/fleet.sh --record"))


if __name__ == "__main__":
    main()
