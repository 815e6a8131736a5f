#!/usr/bin/env python3
"""picogent beside the agents people run today (pi, Claude Code, Codex), on the same
scripted coding task.

One scripted model server per agent (the tests' server, built as an example, serving
every conversation the same script: read a file, edit it, run a bash command that checks
the edit, answer). Each agent runs the task N times on fresh copies of a small project;
an agent that did not do the task gets no time. Also: idle footprints, and a growth run of
one session through 2,000 steps with compaction on.

Peers are installed from the npm registry into bench/cache/ (ignored by git) when
missing. Run: `bash bench/compare.sh [--record]` (BENCH_RUNS=10 by default).
"""
import json, os, shutil, statistics, subprocess, sys, tempfile, time, urllib.request

from report import ROOT, BIN, TARGET, emit, table

SERVER = os.path.join(TARGET, "release/examples/scripted_llm")
CACHE = os.path.join(ROOT, "bench/cache")
RUNS = int(os.environ.get("BENCH_RUNS", "10"))
PEERS = {"pi": "@mariozechner/pi-coding-agent", "claude": "@anthropic-ai/claude-code@2.1.197", "codex": "@openai/codex"}


def install_peers():
    os.makedirs(CACHE, exist_ok=True)
    missing = [spec for name, spec in PEERS.items() if not os.path.exists(os.path.join(CACHE, "node_modules/.bin", name))]
    if missing:
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", CACHE, *missing], check=True)


def version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        return (out.stdout.strip() or out.stderr.strip()).splitlines()[0]
    except Exception as e:  # a peer that does not start is reported, not fatal
        return f"unavailable ({e})"


def start_server(script):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(script, f)
    f.close()
    p = subprocess.Popen([SERVER, f.name, "--per-conversation"], stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().split()[-1]


def stats(addr):
    return json.loads(urllib.request.urlopen(f"http://{addr}/_stats").read())


def project():
    d = tempfile.mkdtemp(prefix="bench-project-")
    open(os.path.join(d, "greet.py"), "w").write("print('Hello, world')\n")
    return d


def measure(cmd, env, cwd):
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    return time.perf_counter() - t0, ru.ru_maxrss / 1024.0, ru.ru_utime + ru.ru_stime, os.waitstatus_to_exitcode(status)


def agents(home):
    """(name, script, command builder, env builder) for each agent on this task."""
    lower = [
        {"tool": "read", "args": {"path": "greet.py"}},
        {"tool": "edit", "args": {"path": "greet.py", "edits": [{"oldText": "Hello", "newText": "Goodbye"}]}},
        {"tool": "bash", "args": {"command": "grep -c Goodbye greet.py"}},
        {"text": "Done: the greeting now says Goodbye."},
    ]
    claude_script = lambda work: [
        {"tool": "Read", "args": {"file_path": os.path.join(work, "greet.py")}},
        {"tool": "Edit", "args": {"file_path": os.path.join(work, "greet.py"), "old_string": "Hello", "new_string": "Goodbye"}},
        {"tool": "Bash", "args": {"command": "grep -c Goodbye greet.py", "description": "check"}},
        {"text": "Done: the greeting now says Goodbye."},
    ]
    codex_script = [
        {"tool": "exec_command", "args": {"cmd": "cat greet.py"}},
        {"tool": "exec_command", "args": {"cmd": "sed -i s/Hello/Goodbye/ greet.py"}},
        {"tool": "exec_command", "args": {"cmd": "grep -c Goodbye greet.py"}},
        {"text": "Done: the greeting now says Goodbye."},
    ]
    base = {"PATH": os.environ["PATH"], "HOME": home}
    return [
        ("picogent", lambda work: lower, lambda addr, work: [BIN, "run", "--dir", work, "Change the greeting to Goodbye"],
         lambda addr: {**base, "PICOGENT_PROVIDER": "anthropic", "PICOGENT_BASE_URL": f"http://{addr}", "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"}),
        ("pi", lambda work: lower, lambda addr, work: [os.path.join(CACHE, "node_modules/.bin/pi"), "-p", "--no-session", "--provider", "scripted", "--model", "scripted-model", "Change the greeting to Goodbye"],
         lambda addr: {**base}),
        ("claude", claude_script, lambda addr, work: [os.path.join(CACHE, "node_modules/.bin/claude"), "-p", "--permission-mode", "bypassPermissions", "--model", "claude-sonnet-4-6", "Change the greeting to Goodbye"],
         lambda addr: {**base, "ANTHROPIC_BASE_URL": f"http://{addr}", "ANTHROPIC_API_KEY": "test-key", "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"}),
        ("codex", lambda work: codex_script,
         lambda addr, work: [os.path.join(CACHE, "node_modules/.bin/codex"), "exec", "--json", "--skip-git-repo-check",
                             "--dangerously-bypass-approvals-and-sandbox", "Change the greeting to Goodbye"],
         lambda addr: {**base, "CODEX_HOME": home, "SCRIPTED_KEY": "test-key"}),
    ]


def run_task_bench(home):
    results = {}
    for name, script_for, cmd_for, env_for in agents(home):
        walls, rss, cpu, first = [], [], [], None
        done = 0
        for _ in range(RUNS):
            work = project()
            server, addr = start_server(script_for(work))
            if name == "codex":
                # A custom provider speaking the Responses API at the scripted server.
                open(os.path.join(home, "config.toml"), "w").write(
                    'model = "scripted-model"\nmodel_provider = "scripted"\n\n[model_providers.scripted]\n'
                    f'name = "scripted"\nbase_url = "http://{addr}/v1"\nwire_api = "responses"\nenv_key = "SCRIPTED_KEY"\n')
            if name == "pi":
                os.makedirs(os.path.join(home, ".pi/agent"), exist_ok=True)
                json.dump({"providers": {"scripted": {"baseUrl": f"http://{addr}", "api": "anthropic-messages", "apiKey": "test-key",
                                                      "models": [{"id": "scripted-model"}]}}}, open(os.path.join(home, ".pi/agent/models.json"), "w"))
            try:
                w, r, c, code = measure(cmd_for(addr, work), env_for(addr), work)
                ok = code == 0 and "Goodbye" in open(os.path.join(work, "greet.py")).read()
                if first is None:
                    sizes = stats(addr)["first_request_bytes"]
                    first = sizes[0] if sizes else None
            finally:
                server.terminate()
                shutil.rmtree(work, ignore_errors=True)
            if ok:
                done += 1
                walls.append(w); rss.append(r); cpu.append(c)
        results[name] = {"done": done, "walls": walls, "rss": rss, "cpu": cpu, "first": first}
    return results


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def idle(cmd, env, cwd, wait=2.0):
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(wait)
    try:
        return rss_mb(p.pid) if p.poll() is None else float("nan")
    finally:
        p.kill()
        p.wait()


def cpu_ns(pid):
    """CPU time of all the process's threads so far (scheduler statistics, in ns)."""
    total = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(open(f"/proc/{pid}/task/{t}/schedstat").read().split()[0])
        except (OSError, ValueError, IndexError):
            pass  # a thread that just ended
    return total


def growth(home, steps=2000, binary=BIN, extra_env=None):
    """Per mark: steps, RSS (MB), wall per step (ms) and picogent's own CPU per step (ms),
    both since the previous mark. The CPU figure leaves out the scripted server.
    `binary` and `extra_env` let an A/B run compare builds or allocator settings."""
    script = [{"tool": "read", "args": {"path": "greet.py", "limit": (i % 50) + 1}} for i in range(steps - 1)] + [{"text": "done"}]
    server, addr = start_server(script)
    work = project()
    cfg = os.path.join(work, "agent.json")
    json.dump({"max_steps": steps + 50, "context_window": 20000, "max_tokens": 2000}, open(cfg, "w"))
    env = {"PATH": os.environ["PATH"], "HOME": home, "PICOGENT_CONFIG": cfg, "PICOGENT_PROVIDER": "anthropic",
           "PICOGENT_BASE_URL": f"http://{addr}", "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn", **(extra_env or {})}
    t0 = time.perf_counter()
    p = subprocess.Popen([binary, "run", "--dir", work, "go"], env=env, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    marks, out = [100, 500, 1000, 2000], []
    last_t, last_n, last_cpu = t0, 0, 0
    while p.poll() is None and marks:
        n = stats(addr)["requests"]
        if n >= marks[0]:
            now, cpu = time.perf_counter(), cpu_ns(p.pid)
            per = max(1, n - last_n)
            out.append((marks[0], rss_mb(p.pid), (now - last_t) / per * 1000, (cpu - last_cpu) / per / 1e6))
            last_t, last_n, last_cpu = now, n, cpu
            marks.pop(0)
        time.sleep(0.005)
    p.wait()
    server.terminate()
    shutil.rmtree(work, ignore_errors=True)
    return out


def main():
    install_peers()
    home = tempfile.mkdtemp(prefix="bench-home-")
    versions = {"picogent": version([BIN, "--version"]), "pi": "pi " + version([os.path.join(CACHE, "node_modules/.bin/pi"), "--version"]),
                "claude": version([os.path.join(CACHE, "node_modules/.bin/claude"), "--version"]),
                "codex": version([os.path.join(CACHE, "node_modules/.bin/codex"), "--version"])}
    res = run_task_bench(home)
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    rows = []
    best_wall = min((med(r["walls"]) for n, r in res.items() if n != "picogent" and r["walls"]), default=float("nan"))
    best_rss = min((med(r["rss"]) for n, r in res.items() if n != "picogent" and r["rss"]), default=float("nan"))
    for name, r in res.items():
        if not r["walls"]:
            rows.append((name, f"0/{RUNS} done", "—", "—", "—", str(r["first"] or "—"), "—"))
            continue
        pg = res["picogent"]
        if name == "picogent":
            ratio = f"{best_wall / med(r['walls']):.0f}× faster, {best_rss / med(r['rss']):.0f}× smaller than the best peer"
        elif pg["walls"]:
            ratio = f"picogent {med(r['walls']) / med(pg['walls']):.0f}× faster, {med(r['rss']) / med(pg['rss']):.1f}× smaller"
        else:
            ratio = ""
        rows.append((name, f"{r['done']}/{RUNS}", f"{med(r['walls']) * 1000:.0f} ms ({min(r['walls']) * 1000:.0f}–{max(r['walls']) * 1000:.0f})",
                     f"{med(r['rss']):.1f} MB", f"{med(r['cpu']) * 1000:.0f} ms", str(r["first"]), ratio))
    text = table("Side by side: read → edit → bash → answer", "bench/compare.py", rows,
                 ("agent", "task done", "wall, median (min–max)", "peak RSS, median", "CPU time, median", "first request, bytes", "picogent vs best peer"),
                 command="bash bench/compare.sh --record")
    text += "\nVersions: " + "; ".join(f"{k}: {v}" for k, v in versions.items()) + "\n"

    idle_rows = []
    work = project()
    env = {"PATH": os.environ["PATH"], "HOME": home, "PICOGENT_API_KEY": "test-key", "PICOGENT_PORT": "0", "RUST_LOG": "warn"}
    idle_rows.append(("picogent chat mode, idle", f"{idle([BIN], env, work):.1f} MB", ""))
    idle_rows.append(("pi --mode rpc, idle", f"{idle([os.path.join(CACHE, 'node_modules/.bin/pi'), '--mode', 'rpc', '--no-session'], {'PATH': os.environ['PATH'], 'HOME': home}, work, 4.0):.1f} MB", ""))
    idle_rows.append(("codex app-server, idle", f"{idle([os.path.join(CACHE, 'node_modules/.bin/codex'), 'app-server'], {'PATH': os.environ['PATH'], 'HOME': home, 'CODEX_HOME': home}, work, 4.0):.1f} MB", ""))
    load = json.loads(subprocess.run([os.path.join(TARGET, "release/examples/chat_load"), BIN, "100", "--settle=10"], capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    idle_rows.append(("picogent chat mode, after 100 chat tasks", f"{load['rss_each_second_mb'][9]:.1f} MB", f"10 s after the last (1 s after: {load['rss_after_mb']:.1f} MB)"))
    idle_rows.append(("picogent agent mode, idle after registration", "see the Agent mode table", "bench/agent.py: also after 1,000 tasks"))
    shutil.rmtree(work, ignore_errors=True)
    text += "\n" + "\n".join(table("Idle footprint", "bench/compare.py", idle_rows, ("process", "RSS", "note")).splitlines()[4:]) + "\n"

    g = growth(home)
    g_rows = [(str(n), f"{rss:.1f} MB", f"{ms:.2f} ms") for n, rss, ms, _ in g]
    text += "\n" + "\n".join(table("Growth", "bench/compare.py", g_rows, ("steps", "RSS", "wall per step since the previous mark")).splitlines()[4:]) + "\n"
    text += "\nGrowth: one `picogent run` session through 2,000 scripted read steps with `context_window` 20,000 (compaction on).\n"
    emit(text)


if __name__ == "__main__":
    main()
