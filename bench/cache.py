#!/usr/bin/env python3
"""Billed-equivalent input tokens of one scripted 20-step task (issue 18, prompt caching).

The tests' scripted model server, started with `--cache`, caches prompts by Anthropic's
rules (prefix up to a `cache_control` breakpoint, 1,024-token minimum, 5-minute lifetime,
20-block look-back; crates/testkit/src/llm_cache.rs) and splits every request's input into
fresh, cache-write and cache-read tokens (a token is 4 bytes of the request). This script
sums them over the whole run, all requests included (side calls too), and prices them as
Anthropic bills input: fresh x1, cache write x1.25, cache read x0.1.

The task: 19 `read` calls of ~1,500-token files, then an answer -- 20 model calls while
the context grows to about 30k tokens. picogent always; pi and Claude Code when they are
installed in bench/cache/ (`--peers` installs them from npm, as bench/compare.sh does).
Run: `bash bench/cache.sh [--record] [--peers]`.
"""
import json, os, shutil, subprocess, sys, tempfile, urllib.request

from report import ROOT, BIN, TARGET, emit, table

SERVER = os.path.join(TARGET, "release/examples/scripted_llm")
CACHE = os.path.join(ROOT, "bench/cache")
PEERS = {"pi": "@mariozechner/pi-coding-agent", "claude": "@anthropic-ai/claude-code@2.1.197"}
FILES = [f"f{i:02}.txt" for i in range(1, 20)]


def project():
    d = tempfile.mkdtemp(prefix="bench-cache-")
    for n, name in enumerate(FILES):
        lines = [f"{name} line {i}: the quick brown fox jumps over the lazy dog {n * 100 + i}" for i in range(90)]
        open(os.path.join(d, name), "w").write("\n".join(lines) + "\n")
    return d


def start_server(script):
    f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    json.dump(script, f)
    f.close()
    p = subprocess.Popen([SERVER, f.name, "--per-conversation", "--cache"], stdout=subprocess.PIPE, text=True)
    return p, p.stdout.readline().split()[-1]


def stats(addr):
    return json.loads(urllib.request.urlopen(f"http://{addr}/_stats").read())


def agents(home):
    answer = {"text": "Read all 19 files."}
    lower = lambda work: [{"tool": "read", "args": {"path": f}} for f in FILES] + [answer]
    claude = lambda work: [{"tool": "Read", "args": {"file_path": os.path.join(work, f)}} for f in FILES] + [answer]
    base = {"PATH": os.environ["PATH"], "HOME": home}
    prompt = "Read every fNN.txt file in this folder, one by one."
    bin_ = lambda name: os.path.join(CACHE, "node_modules/.bin", name)
    out = [("picogent", lower, [BIN, "run", "--dir", "{work}", prompt],
            lambda addr: {**base, "PICOGENT_PROVIDER": "anthropic", "PICOGENT_BASE_URL": f"http://{addr}",
                          "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"})]
    if os.path.exists(bin_("pi")):
        out.append(("pi", lower, [bin_("pi"), "-p", "--no-session", "--provider", "scripted", "--model", "scripted-model", prompt],
                    lambda addr: dict(base)))
    if os.path.exists(bin_("claude")):
        out.append(("claude", claude, [bin_("claude"), "-p", "--permission-mode", "bypassPermissions", "--model", "claude-sonnet-4-6", prompt],
                    lambda addr: {**base, "ANTHROPIC_BASE_URL": f"http://{addr}", "ANTHROPIC_API_KEY": "test-key",
                                  "IS_SANDBOX": "1", "DISABLE_AUTOUPDATER": "1"}))
    return out


def run_one(home, name, script_for, cmd, env_for):
    work = project()
    server, addr = start_server(script_for(work))
    try:
        if name == "pi":
            os.makedirs(os.path.join(home, ".pi/agent"), exist_ok=True)
            json.dump({"providers": {"scripted": {"baseUrl": f"http://{addr}", "api": "anthropic-messages", "apiKey": "test-key",
                                                  "models": [{"id": "scripted-model"}]}}}, open(os.path.join(home, ".pi/agent/models.json"), "w"))
        argv = [a.replace("{work}", work) for a in cmd]
        p = subprocess.run(argv, env=env_for(addr), cwd=work, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
        s = stats(addr)
        return p.returncode, s["requests"], s["input"], p.stderr
    finally:
        server.terminate()
        shutil.rmtree(work, ignore_errors=True)


def main():
    if "--peers" in sys.argv:
        os.makedirs(CACHE, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", CACHE, *PEERS.values()], check=True)
    home = tempfile.mkdtemp(prefix="bench-cache-home-")
    rows = []
    for name, script_for, cmd, env_for in agents(home):
        code, calls, t, err = run_one(home, name, script_for, cmd, env_for)
        if code != 0:
            rows.append((name, f"failed (exit {code}): {err.strip().splitlines()[-1] if err.strip() else ''}", "", "", "", "", "", ""))
            continue
        sent = t["fresh"] + t["cache_write"] + t["cache_read"]
        billed = t["fresh"] + 1.25 * t["cache_write"] + 0.1 * t["cache_read"]
        rows.append((name, str(calls), f"{sent:,}", f"{t['fresh']:,}", f"{t['cache_write']:,}", f"{t['cache_read']:,}",
                     f"{billed:,.0f}", f"{billed / sent:.2f}"))
    shutil.rmtree(home, ignore_errors=True)
    text = table("Prompt caching: billed-equivalent input tokens, 20-step task", "bench/cache.py", rows,
                 ("agent", "model calls", "input tokens sent", "fresh (x1)", "cache write (x1.25)", "cache read (x0.1)",
                  "billed-equivalent", "billed / sent"),
                 command="bash bench/cache.sh --record")
    text += ("\nThe task: 19 `read` calls of ~1,500-token files, then an answer (20 model calls, context growing to ~30k tokens). "
             "`input tokens sent` is what the run costs without caching; `billed / sent` is the share caching leaves to pay.\n")
    emit(text)


if __name__ == "__main__":
    main()
