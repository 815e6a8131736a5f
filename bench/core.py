#!/usr/bin/env python3
"""Core benchmarks for `picogent run` (issue: the agent core).

1. A 4-step task (read -> edit -> bash -> answer) through the Anthropic wire format:
   wall time and peak RSS of the whole `picogent run` process, median of N runs.
2. Per-step loop overhead: a 200-step run (199 cheap `read` calls, then an answer)
   minus a 1-step run, divided by 199.

The model server is the tests' scripted server (release/examples/scripted_llm under
$CARGO_TARGET_DIR, or target/), so model latency is zero and what is measured is
picogent itself.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from report import BIN, TARGET, emit, table

SERVER = os.path.join(TARGET, "release/examples/scripted_llm")
RUNS = int(os.environ.get("BENCH_RUNS", "20"))


def start_server(script):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(script, f)
    f.close()
    p = subprocess.Popen([SERVER, f.name], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return p, line.split()[-1]


def run_picogent(addr, work, prompt, extra_env=None):
    env = {
        "PATH": os.environ["PATH"],
        "HOME": work,
        "PICOGENT_PROVIDER": "anthropic",
        "PICOGENT_BASE_URL": f"http://{addr}",
        "PICOGENT_API_KEY": "test-key",
        "RUST_LOG": "warn",
    }
    env.update(extra_env or {})
    t0 = time.perf_counter()
    p = subprocess.Popen([BIN, "run", "--dir", work, prompt], env=env, cwd=work,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, rusage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"picogent failed: {err}")
    cpu = rusage.ru_utime + rusage.ru_stime
    return wall, rusage.ru_maxrss / 1024.0, cpu  # ru_maxrss is in KiB on Linux


def fresh_project():
    d = tempfile.mkdtemp(prefix="picogent-bench-")
    with open(os.path.join(d, "greet.py"), "w") as f:
        f.write("print('Hello, world')\n")
    return d


def four_step():
    script = [
        {"tool": "read", "args": {"path": "greet.py"}},
        {"tool": "edit", "args": {"path": "greet.py", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}},
        {"tool": "bash", "args": {"command": "grep -c Goodbye greet.py"}},
        {"text": "Done: the greeting now says Goodbye."},
    ]
    server, addr = start_server(script)
    walls, rss = [], []
    try:
        for _ in range(RUNS):
            work = fresh_project()
            w, r, _ = run_picogent(addr, work, "Change the greeting to Goodbye")
            with open(os.path.join(work, "greet.py")) as f:
                assert "Goodbye" in f.read(), "the task was not done"
            walls.append(w)
            rss.append(r)
            shutil.rmtree(work)
    finally:
        server.terminate()
    return walls, rss


def n_steps(n):
    script = [{"tool": "read", "args": {"path": "greet.py", "limit": i + 1}} for i in range(n - 1)]
    script.append({"text": "done"})
    server, addr = start_server(script)
    try:
        work = fresh_project()
        with open(os.path.join(work, "agent.json"), "w") as f:
            json.dump({"max_steps": n + 10}, f)
        # A config file in --agent would set work_dir; pass it through the environment instead.
        w, r, cpu = run_picogent(addr, work, "go", {"PICOGENT_CONFIG": os.path.join(work, "agent.json")})
        shutil.rmtree(work)
    finally:
        server.terminate()
    return w, r, cpu


def main():
    walls, rss = four_step()
    ones = [n_steps(1) for _ in range(5)]
    one = min(w for w, _, _ in ones)
    one_cpu = min(c for _, _, c in ones)
    long_runs = [n_steps(200) for _ in range(3)]
    long_wall = min(w for w, _, _ in long_runs)
    long_cpu = min(c for _, _, c in long_runs)
    long_rss = max(r for _, r, _ in long_runs)
    per_step_ms = (long_wall - one) / 199 * 1000
    per_step_cpu_ms = (long_cpu - one_cpu) / 199 * 1000
    rows = [
        ("4-step task, wall (median of %d)" % RUNS, "%.1f ms" % (statistics.median(walls) * 1000),
         "min %.1f / max %.1f ms" % (min(walls) * 1000, max(walls) * 1000), "< 100 ms"),
        ("4-step task, peak RSS (median)", "%.1f MB" % statistics.median(rss),
         "max %.1f MB" % max(rss), "< 20 MB"),
        ("1-step run, wall (best of 5)", "%.1f ms" % (one * 1000), "", ""),
        ("200-step run, wall (best of 3)", "%.1f ms" % (long_wall * 1000), "peak RSS %.1f MB" % long_rss, ""),
        ("loop overhead per step, wall", "%.2f ms" % per_step_ms, "(200-step − 1-step) / 199, incl. a read tool call, the HTTP round trip and the server's time", "< 1 ms"),
        ("loop overhead per step, picogent CPU", "%.2f ms" % per_step_cpu_ms, "user+sys of the picogent process, same difference", ""),
    ]
    emit(table("Core", "bench/core.py", rows))


if __name__ == "__main__":
    main()
