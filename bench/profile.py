#!/usr/bin/env python3
"""The release profile against the dist profile at run time (issue 28): what thin LTO
over parallel codegen units (`[profile.release]`, what `cargo run --release` builds)
costs against fat LTO with one codegen unit (`[profile.dist]`).

Times a 300-step `picogent run` (299 `read` calls, then an answer) against the tests'
scripted model server (a debug build, as bench/profile.sh builds it), the two binaries
in turn, pair by pair, after one warm-up run each. Per binary: the median CPU time
(user + system) and wall time of the whole process, its peak RSS, and its size
stripped; the ratio release / dist is the median of the pairs' ratios, so a machine
that drifts during the call drifts for both.

Run: `bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS] [--record]` (RUNS: 15).
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time

from report import TARGET, emit, table

SERVER = os.path.join(TARGET, "debug/examples/scripted_llm")
STEPS = 300


def start_server(work):
    # Arguments that differ from call to call: the repeat guard stops a loop of identical ones.
    turns = [{"tool": "read", "args": {"path": "greet.py", "limit": i + 1}} for i in range(STEPS - 1)]
    turns.append({"text": "done"})
    path = os.path.join(work, "script.json")
    json.dump(turns, open(path, "w"))
    p = subprocess.Popen([SERVER, path], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline().strip()
    assert line.startswith("listening on "), line
    return p, line.split()[-1]


# A child's peak RSS as the kernel counts it starts from its parent's when it is forked,
# so this script's own (~15 MB) would be a floor under picogent's: GNU time, a small
# process, starts picogent and reports its peak instead (%M, KiB).
TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None


def run(binary, work, env):
    """(wall s, CPU s, peak RSS MiB) of one whole `picogent run`."""
    cmd = [binary, "run", "--dir", work, "hi"]
    peak_file = os.path.join(work, "peak")
    if TIME:
        cmd = [TIME, "-f", "%M", "-o", peak_file] + cmd
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"{binary} failed (exit {p.returncode})")
    # The CPU time includes the children waited for: picogent's, and GNU time's own (tiny).
    peak = int(open(peak_file).read().split()[-1]) / 1024.0 if TIME else ru.ru_maxrss / 1024.0
    return wall, ru.ru_utime + ru.ru_stime, peak


def stripped_mb(binary, work):
    """The binary's size in MB once stripped (as it is when `strip` is missing)."""
    out = os.path.join(work, "stripped")
    if shutil.which("strip") and subprocess.run(["strip", "-o", out, binary]).returncode == 0:
        return os.path.getsize(out) / 1e6
    return os.path.getsize(binary) / 1e6


def main():
    args = [a for a in sys.argv[1:] if a != "--record"]
    if len(args) not in (2, 3):
        sys.exit("usage: bash bench/profile.sh RELEASE_BIN DIST_BIN [RUNS] [--record]")
    bins = [os.path.abspath(args[0]), os.path.abspath(args[1])]
    runs = int(args[2]) if len(args) == 3 else 15
    work = tempfile.mkdtemp(prefix="picogent-bench-profile-")
    server = None
    try:
        with open(os.path.join(work, "greet.py"), "w") as f:
            f.write("print('Hello, world')\n")
        # ./agent.json in the working folder: room for the 300 steps.
        with open(os.path.join(work, "agent.json"), "w") as f:
            f.write('{"max_steps": 400}\n')
        server, addr = start_server(work)
        env = {"PATH": os.environ["PATH"], "HOME": work, "PICOGENT_PROVIDER": "anthropic",
               "PICOGENT_BASE_URL": f"http://{addr}", "PICOGENT_API_KEY": "test-key", "RUST_LOG": "off"}
        for b in bins:  # one warm-up run each, not counted
            run(b, work, env)
        res = [[], []]  # per binary: (wall, cpu, rss) of each run
        for _ in range(runs):
            for i, b in enumerate(bins):
                res[i].append(run(b, work, env))
        sizes = [stripped_mb(b, work) for b in bins]
    finally:
        if server:
            server.terminate()
        shutil.rmtree(work, ignore_errors=True)

    def cell(i, k, fmt):
        xs = [r[k] for r in res[i]]
        return f"{fmt(statistics.median(xs))} ({fmt(min(xs))}–{fmt(max(xs))})"

    def ratio(k):
        return "×%.2f" % statistics.median(a[k] / b[k] for a, b in zip(res[0], res[1]))

    s = lambda x: "%.3f s" % x
    mib = lambda x: "%.1f MiB" % x
    rows = [
        (f"{STEPS}-step `picogent run`, CPU (user + system)", cell(0, 1, s), cell(1, 1, s), ratio(1)),
        ("same, wall (includes the scripted model server's time, a debug build)", cell(0, 0, s), cell(1, 0, s), ratio(0)),
        ("same, peak RSS" + ("" if TIME else " (no /usr/bin/time: reads no lower than this script's own)"),
         cell(0, 2, mib), cell(1, 2, mib), ratio(2)),
        ("binary, stripped", "%.1f MB" % sizes[0], "%.1f MB" % sizes[1], "×%.2f" % (sizes[0] / sizes[1])),
    ]
    text = table("Build profiles: `release` (thin LTO) against `dist` (fat LTO, one codegen unit)", "bench/profile.py", rows,
                 (f"median (min–max) of {runs} pairs", "`release` (thin LTO)", "`dist` (fat LTO, 1 CGU)",
                  "release / dist, median of the pairs"),
                 command="bash bench/profile.sh " + " ".join(sys.argv[1:]), binary=bins[0])
    text += (f"\n`release`: `{bins[0]}`; `dist`: `{bins[1]}`, run in turn. CPU time and peak RSS are picogent's "
             "own (the whole process, from its exit status); how long each profile takes to build is not measured here.\n")
    emit(text)


if __name__ == "__main__":
    main()
