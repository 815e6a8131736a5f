#!/usr/bin/env python3
"""What the sandbox costs (issue 24, "then make it cheap"), side by side in one run:
`sandbox: off`, `landlock` and namespaces, for

1. the 4-step task of bench/core.py (read -> edit -> bash -> answer), wall time of the
   whole `picogent run`, median of N runs;
2. a 1-step run that starts no command (only the answer), median of N runs: any
   start-up probe shows here;
3. the helper alone: `picogent sandbox-exec ... -- /bin/true`, median of N runs.

Each figure is taken for every build given (`--bin A --bin B`, default: this
checkout's release build), the builds taking turns run by run so a drifting machine
drifts for all of them. The allowed folder is the task's own, as an agent would have it.

Every figure is taken twice: on an idle machine, and with CPU-bound neighbours (busy
loops, one per core by default, `BENCH_BUSY`), as on an agent host where other tasks'
models and commands keep the cores busy.
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from report import emit, table, BIN, TARGET

RUNS = int(os.environ.get("BENCH_RUNS", "20"))
BUSY = int(os.environ.get("BENCH_BUSY", str(os.cpu_count() or 2)))
SERVER = os.path.join(TARGET, "release/examples/scripted_llm")
LEVELS = [("off", "off"), ("landlock", "landlock"), ("namespaces", "on")]


def start_server(script, server):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(script, f)
    f.close()
    p = subprocess.Popen([server, f.name], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return p, line.split()[-1]


def project():
    d = tempfile.mkdtemp(prefix="picogent-bench-")
    work = os.path.join(d, "work")
    os.mkdir(work)
    with open(os.path.join(work, "greet.py"), "w") as f:
        f.write("print('Hello, world')\n")
    with open(os.path.join(d, "agent.json"), "w") as f:
        json.dump({"allowed_paths": [work], "work_dir": work, "max_steps": 20}, f)
    return d, work


def run(binary, addr, level, prompt):
    d, work = project()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": d,
        "PICOGENT_PROVIDER": "anthropic",
        "PICOGENT_BASE_URL": f"http://{addr}",
        "PICOGENT_API_KEY": "test-key",
        "PICOGENT_SANDBOX": level,
        "PICOGENT_CHECKPOINTS": "off",
        "RUST_LOG": "warn",
    }
    t0 = time.perf_counter()
    p = subprocess.run([binary, "run", "--agent", d, prompt], env=env, cwd=d,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"{binary} failed at {level}: {p.stderr.decode()}")
    shutil.rmtree(d)
    return wall


def helper(binary, level):
    d, work = project()
    args = [binary, "sandbox-exec"] + (["--ns"] if level == "on" else [])
    args += ["--rw", work, "--tmp", work, "--hide", os.path.join(d, "agent.json"), "--", "/bin/true"]
    if level == "off":
        args = ["/bin/true"]
    t0 = time.perf_counter()
    subprocess.run(args, check=True, cwd=work)
    wall = time.perf_counter() - t0
    shutil.rmtree(d)
    return wall


FOUR = [
    {"tool": "read", "args": {"path": "greet.py"}},
    {"tool": "edit", "args": {"path": "greet.py", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}},
    {"tool": "bash", "args": {"command": "grep -c Goodbye greet.py"}},
    {"text": "Done."},
]
ONE = [{"text": "done"}]


def measure(bins, servers, load, results):
    for _ in range(RUNS):
        for b in bins:
            for name, level in LEVELS:
                for key, prompt in (("four", "Change the greeting"), ("one", "hi")):
                    w = run(b, servers[key][1], level, prompt)
                    results.setdefault((b, name, key, load), []).append(w)
                results.setdefault((b, name, "helper", load), []).append(helper(b, level))


def main():
    bins = [a for i, a in enumerate(sys.argv) if i > 0 and sys.argv[i - 1] == "--bin"] or [BIN]
    names = [os.path.basename(os.path.dirname(os.path.dirname(b))) or b for b in bins]
    results = {}
    servers = {}
    for key, script in (("four", FOUR), ("one", ONE)):
        p, addr = start_server(script, SERVER)
        servers[key] = (p, addr)
    try:
        for load in ("idle", "busy"):
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                       for _ in range(BUSY if load == "busy" else 0)]
            try:
                measure(bins, servers, load, results)
            finally:
                for p in burners:
                    p.kill()
                    p.wait()
    finally:
        for p, _ in servers.values():
            p.terminate()
    med = lambda k: statistics.median(results[k]) * 1000
    rows = []
    for key, what in (("four", "4-step task (one bash command)"), ("one", "1-step run, no command"),
                      ("helper", "helper alone, /bin/true")):
        for load in ("idle", "busy"):
            for b, n in zip(bins, names):
                cells = [f"{med((b, name, key, load)):.1f} ms" for name, _ in LEVELS]
                shown = "idle" if load == "idle" else f"{BUSY} busy neighbours"
                rows.append((f"{what}, {shown} — {n}", *cells))
    emit(table("Sandbox cost", "bench/sandbox.py", rows,
               columns=("measure (median of %d)" % RUNS, "off", "landlock", "namespaces"),
               command="python3 bench/sandbox.py --bin A --bin B --record"))


if __name__ == "__main__":
    main()
