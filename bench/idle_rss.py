"""Idle RSS of agent mode 1 s after registration, as bench/agent.py measures it, for
one binary over N starts: `python3 bench/idle_rss.py BINARY [N]` (run two binaries in
turn for an A/B on one machine; the fake tracker and model come from the release
examples, as in bench/run.sh)."""
import sys, os, time, tempfile, json, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent
binary = os.path.abspath(sys.argv[1])
vals = []
for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 5):
    tmp = tempfile.mkdtemp()
    script = os.path.join(tmp, "s.json"); json.dump([{"text": "done"}], open(script, "w"))
    llm = subprocess.Popen([agent.LLM, script], stdout=subprocess.PIPE, text=True)
    addr = llm.stdout.readline().split()[-1]
    tracker, stats, port, daemon = agent.start_agent(binary, tmp, f"http://{addr}", max_concurrent_tasks=4)
    time.sleep(1.0)
    vals.append(agent.rss_mb(daemon.pid))
    daemon.terminate(); tracker.terminate(); llm.terminate(); daemon.wait()
vals.sort()
print(binary, "idle RSS MB:", vals, "median", vals[len(vals)//2])
