#!/usr/bin/env python3
"""GitHub webhook acknowledgement with the PostgreSQL store against the file store
(issue 39): one worker in GitHub mode, signed `issues` `assigned` deliveries (each a
task: decided against the book and journaled, in one transaction with PostgreSQL,
before its 202), one sender and 50, medians of 3 runs. GitHub is a stub that answers
every issue as closed, so each task is let go before its run (the background work is
the same for both stores). Run by `bash bench/fleet.sh --github` (throwaway PostgreSQL).
"""
import http.server, json, os, statistics, subprocess, sys, tempfile, threading, time

import pgdb
from agent import free_port
from github import LOGIN, REPO, SECRET, FakeGithub
from report import BIN, TARGET, emit, table

LOAD = os.path.join(TARGET, "release/examples/webhook_load")


class Stub(FakeGithub):
    """bench/github.py's stand-in for GitHub, with every issue answered closed: each task
    is let go before its run."""

    def do_GET(self):
        path = self.path.split("?")[0]
        tail = path.rsplit("/", 1)[-1]
        if path.startswith(f"/repos/{REPO}/issues/") and tail.isdigit():
            return self.answer(200, {"number": int(tail), "title": "t", "body": "", "state": "closed",
                                     "user": {"login": "acme"}, "author_association": "OWNER",
                                     "assignees": [], "labels": []})
        return super().do_GET()


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=B", "-c", "user.email=b@x", *args], cwd=cwd,
                   check=True, capture_output=True)


def acks(store, senders, total, api):
    tmp = tempfile.mkdtemp(prefix="picogent-gh-acks-")
    work, home = os.path.join(tmp, "work"), os.path.join(tmp, "agent")
    os.makedirs(work)
    os.makedirs(home)
    open(os.path.join(work, "f.txt"), "w").write("x\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "first")
    bare = os.path.join(tmp, "remote.git")
    git(tmp, "init", "-q", "--bare", bare)
    port = free_port()
    cfg = {"name": "Bench", "slug": "bench", "tracker": "github", "listen_port": port,
           "provider": "anthropic", "base_url": "http://127.0.0.1:9", "work_dir": work,
           "allowed_paths": [work], "max_concurrent_tasks": 2, "sandbox": "off",
           "github": {"repo": REPO, "api_url": api, "webhook_secret": SECRET, "remote_url": bare}}
    if store:
        cfg["store"] = store
    json.dump(cfg, open(os.path.join(home, "agent.json"), "w"))
    env = {"PATH": os.environ["PATH"], "HOME": tmp, "GITHUB_TOKEN": "bench-token",
           "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"}
    p = subprocess.Popen([BIN, home], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(tmp, "worker.log"), "w"))
    try:
        deadline = time.time() + 30
        import urllib.request
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=1)
                break
            except Exception:
                if time.time() > deadline or p.poll() is not None:
                    sys.exit("the worker did not start: " + open(os.path.join(tmp, "worker.log")).read())
                time.sleep(0.05)
        subprocess.run([LOAD, str(port), SECRET, REPO, LOGIN, str(senders), "200", "1"],
                       capture_output=True, check=True, timeout=300)
        out = subprocess.run([LOAD, str(port), SECRET, REPO, LOGIN, str(senders), str(total), "1000"],
                             capture_output=True, text=True, check=True, timeout=300)
        return json.loads(out.stdout)
    finally:
        p.terminate()
        p.wait(timeout=60)


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    api = f"http://127.0.0.1:{server.server_address[1]}"
    rows = []
    for senders, total in ((1, 500), (50, 2000)):
        runs = {"files": [], "postgres": []}
        for _ in range(3):
            runs["files"].append(acks(None, senders, total, api))
            runs["postgres"].append(acks(pgdb.database(), senders, total, api))
        med = lambda k, key: statistics.median(r[key] for r in runs[k])
        for k in ("files", "postgres"):
            rows.append((f"{k}, {senders} sender(s)", "%.2f ms" % med(k, "p50_ms"), "%.2f ms" % med(k, "p99_ms"),
                         "%.0f deliveries/s" % (total / med(k, "wall_s")),
                         "%.2f×" % (med(k, "p99_ms") / med("files", "p99_ms")) if k == "postgres" else ""))
        print(rows[-2:], file=sys.stderr, flush=True)
    emit(table("Fleet: GitHub webhook acknowledgement, PostgreSQL store against file store",
               "bench/github_acks.py", rows,
               columns=("store", "ack p50", "ack p99", "throughput", "p99 vs files (target ≤ 2×)"),
               command="bash bench/fleet.sh --github --record")
         + "\nMedians of 3 runs; signed `issues` `assigned` deliveries, one new issue each (decided and "
           "journaled before the 202; with PostgreSQL the decision, the event and the book's entry are "
           "one transaction under the repository's lock). PostgreSQL 15 on this machine, fsync on.\n")


if __name__ == "__main__":
    main()
