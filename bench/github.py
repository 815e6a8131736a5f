#!/usr/bin/env python3
"""GitHub mode (issue 29): idle memory and webhook-to-202 latency.

Starts the tests' scripted model server (built as an example), a small stand-in for
GitHub's REST API (here, in Python: it answers what picogent asks at start and takes
every comment, reaction and pull request), a clone with a bare repository as its remote,
then `picogent <agent dir>` with `"tracker": "github"`, and measures:
1. idle RSS (VmRSS and the peak, VmHWM) 1 s and 5 s after it listens;
2. the time from POSTing a signed `issues` `assigned` delivery to its 202 (the event
   journaled and synced), for N deliveries of N issues one after another on a
   keep-alive connection; the runs they start go on at the same time, one at a time;
3. the same for a redelivery of each (answered 200, nothing journaled);
4. RSS once every issue was worked and its progress comment finished.

    python3 bench/github.py [N] [--record]
"""
import hashlib, hmac, http.client, http.server, json, os, socket, subprocess, sys, tempfile, threading, time

from agent import LLM, free_port, rss_mb
from report import BIN, emit, table

N = int(next((a for a in sys.argv[1:] if a.isdigit()), "200"))
SECRET = "bench-secret"
REPO = "acme/widgets"
LOGIN = "picogent-bench"


def vm(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class FakeGithub(http.server.BaseHTTPRequestHandler):
    """Just enough of GitHub: who picogent is, the repository, empty lists, and every
    write taken (its count kept in `finished` for finished progress comments)."""
    protocol_version = "HTTP/1.1"
    lock = threading.Lock()
    next_id = [1000]
    finished = [0]

    def log_message(self, *a):
        pass

    def setup(self):
        super().setup()
        # Headers and body go out as two writes: without this, Nagle's algorithm and
        # the client's delayed ACK would add 40 ms to every answer, which is this
        # stand-in's cost, not picogent's.
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-ratelimit-remaining", "4999")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/user":
            return self.answer(200, {"login": LOGIN, "id": 1})
        if path == f"/repos/{REPO}":
            return self.answer(200, {"full_name": REPO, "default_branch": "main"})
        if path.startswith(f"/repos/{REPO}/issues/") and path.count("/") == 5:
            n = int(path.rsplit("/", 1)[1])
            return self.answer(200, {"number": n, "title": f"Issue {n}", "state": "open",
                                     "assignees": [{"login": LOGIN}], "labels": [],
                                     "user": {"login": "alice"}, "author_association": "OWNER"})
        return self.answer(200, [])

    def write(self, status):
        length = int(self.headers.get("Content-Length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        with self.lock:
            self.next_id[0] += 1
            n = self.next_id[0]
            if "picogent finished" in body.get("body", "") or "could not finish" in body.get("body", ""):
                self.finished[0] += 1
        self.answer(status, {"id": n, "number": n, "html_url": f"https://github.com/{REPO}/pull/{n}",
                             "user": {"login": LOGIN}, "body": body.get("body", "")})

    def do_POST(self):
        if self.path.startswith("/v1/messages"):
            # The model that never answers: runs wait, and only the intake works.
            time.sleep(3600)
        self.write(201)

    def do_PATCH(self):
        self.write(200)


def git(cwd, *args):
    subprocess.run(["git", "-c", "user.name=B", "-c", "user.email=b@example.com", *args], cwd=cwd,
                   check=True, capture_output=True, env={**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null"})


def delivery(n):
    payload = {"action": "assigned", "assignee": {"login": LOGIN},
               "issue": {"number": n, "title": f"Issue {n}", "body": "Do it.", "state": "open",
                         "assignees": [{"login": LOGIN}], "labels": [], "user": {"login": "alice"},
                         "author_association": "OWNER"},
               "repository": {"full_name": REPO, "name": "widgets", "owner": {"login": "acme"}},
               "sender": {"login": "alice"}}
    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return body, {"X-GitHub-Event": "issues", "X-GitHub-Delivery": f"bench-{n}",
                  "X-Hub-Signature-256": sig, "Content-Type": "application/json",
                  "User-Agent": "GitHub-Hookshot/bench"}


def post_all(port, expect):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    lat = []
    for n in range(1, N + 1):
        body, headers = delivery(n)
        t0 = time.perf_counter()
        conn.request("POST", "/github/webhook", body, headers)
        resp = conn.getresponse()
        resp.read()
        lat.append((time.perf_counter() - t0) * 1000)
        if resp.status != expect:
            sys.exit(f"delivery {n}: HTTP {resp.status}, expected {expect}")
    return sorted(lat)


def session(base_url, api, work_out):
    """One daemon: idle memory, then N deliveries and N redeliveries; with `work_out`,
    waits until every issue was worked. Returns the figures."""
    tmp = tempfile.mkdtemp(prefix="picogent-github-bench-")
    work, remote, home = (os.path.join(tmp, d) for d in ("work", "remote.git", "agent"))
    for d in (work, home):
        os.makedirs(d)
    open(os.path.join(work, "README"), "w").write("bench\n")
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "-q", "-m", "first")
    git(tmp, "init", "-q", "--bare", remote)
    port = free_port()
    json.dump({"name": "Bench", "slug": "bench", "tracker": "github", "listen_port": port,
               "provider": "anthropic", "base_url": base_url, "work_dir": work,
               "allowed_paths": [work], "max_concurrent_tasks": 1, "shutdown_grace_sec": 1,
               "github": {"repo": REPO, "api_url": f"http://127.0.0.1:{api.server_address[1]}",
                          "webhook_secret": SECRET, "remote_url": remote}},
              open(os.path.join(home, "agent.json"), "w"))
    env = {"PATH": os.environ["PATH"], "HOME": tmp, "GITHUB_TOKEN": "ghp_bench",
           "PICOGENT_API_KEY": "test-key", "RUST_LOG": "warn"}
    FakeGithub.finished[0] = 0
    daemon = subprocess.Popen([BIN, home], env=env, cwd=tmp, stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(tmp, "daemon.log"), "w"))
    r = {}
    try:
        deadline = time.time() + 30
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/livez")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if time.time() > deadline:
                sys.exit("picogent never listened")
            time.sleep(0.05)
        time.sleep(1.0)
        r["idle1"] = vm(daemon.pid, "VmRSS")
        time.sleep(4.0)
        r["idle5"], r["hwm_idle"] = vm(daemon.pid, "VmRSS"), vm(daemon.pid, "VmHWM")
        r["fresh"] = post_all(port, 202)
        r["dup"] = post_all(port, 200)
        if work_out:
            t0 = time.time()
            while FakeGithub.finished[0] < N:
                if time.time() > t0 + 600:
                    sys.exit(f"only {FakeGithub.finished[0]} of {N} issues finished")
                time.sleep(0.2)
            r["worked"] = time.time() - t0
            time.sleep(1.0)
        r["after"], r["hwm"] = vm(daemon.pid, "VmRSS"), vm(daemon.pid, "VmHWM")
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
    return r


def main():
    tmp = tempfile.mkdtemp(prefix="picogent-github-bench-")
    script = os.path.join(tmp, "script.json")
    json.dump([{"text": "done"}], open(script, "w"))
    llm = subprocess.Popen([LLM, script], stdout=subprocess.PIPE, text=True)
    llm_addr = llm.stdout.readline().split()[-1]
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeGithub)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        quiet = session(f"http://127.0.0.1:{api.server_address[1]}", api, False)
        busy = session(f"http://{llm_addr}", api, True)
    finally:
        llm.terminate()
        api.shutdown()
    p = lambda lat, q: lat[min(len(lat) - 1, int(q * len(lat)))]
    rows = [
        ("idle RSS", "%.1f MB" % quiet["idle1"],
         "VmRSS 1 s after listening; %.1f MB at 5 s (peak %.1f MB)" % (quiet["idle5"], quiet["hwm_idle"]), "≤ 10 MB"),
        (f"webhook → 202, p50 / p99 ({N} deliveries)", "%.2f / %.2f ms" % (p(quiet["fresh"], 0.5), p(quiet["fresh"], 0.99)),
         "signed `issues` `assigned`: HMAC checked, journaled and synced; the one run started waits on the model; max %.2f ms" % quiet["fresh"][-1], "≤ 5 ms p99"),
        ("the same, while the issues are worked", "%.2f / %.2f ms" % (p(busy["fresh"], 0.5), p(busy["fresh"], 0.99)),
         "one run at a time, each making a worktree, committing, pushing; max %.2f ms" % busy["fresh"][-1], ""),
        ("redelivery → 200, p50 / p99", "%.2f / %.2f ms" % (p(quiet["dup"], 0.5), p(quiet["dup"], 0.99)),
         "recognised, nothing journaled", ""),
        (f"all {N} issues worked", "%.1f s" % busy["worked"],
         "after the last redelivery; progress comment finished for each", ""),
        (f"RSS with {N} tasks queued", "%.1f MB" % quiet["after"], "VmRSS; peak %.1f MB" % quiet["hwm"], ""),
        (f"RSS after {N} issues worked", "%.1f MB" % busy["after"], "VmRSS; peak %.1f MB" % busy["hwm"], ""),
    ]
    emit(table("GitHub mode", "bench/github.py", rows, command="python3 bench/github.py " + " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()
