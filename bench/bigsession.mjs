// Does a long session's load hold up other connections? A 24 MB pi session file
// (compacted near its end, as long sessions are) is written into chat mode's sessions
// folder; one client asks for it three ways at once (two prompts in it and its
// history), while a second client sends a frame the server
// answers at once (a frame it refuses) every 2 ms. Measured: the second client's
// longest and 99th-percentile round trip while the loads run, and how long the first
// prompt's answer took (the load is on its path).
//
//   node --experimental-websocket bench/bigsession.mjs [MB] [--against DIR [--as NAME]] [--record]
//
// Uses the build in CARGO_TARGET_DIR (or ./target), debug unless PICOGENT_PROFILE=release,
// through tests/browser/harness.mjs. `--against DIR` runs the same against the build in
// another cargo target folder first (an older version) and shows both.
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startPicogent, stopAll, target } from "../tests/browser/harness.mjs";
import { cli, emit } from "./report.mjs";

const { record, args: all } = cli();
// `--against DIR [--as NAME]`: NAME (a commit, a version) says which build DIR holds.
const opt = (name) => { const i = all.indexOf(name); return i >= 0 ? all[i + 1] : null; };
const against = opt("--against"), againstName = opt("--as") || against;
const args = all.filter((a, i) => !["--against", "--as"].includes(a) && !["--against", "--as"].includes(all[i - 1]));
const mb = Number(args[0] || 24);

/** A pi v3 session of about `mb` MB: alternating user and assistant messages. */
function bigSession(cwd) {
  const lines = [JSON.stringify({ type: "session", version: 3, id: "big", timestamp: new Date().toISOString(), cwd })];
  const text = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. ".repeat(36);
  let parent = null, size = 0, n = 0;
  while (size < mb * 1e6) {
    const id = (0x10000000 + n++).toString(16);
    const message = n % 2
      ? { role: "user", content: [{ type: "text", text }], timestamp: Date.now() }
      : { role: "assistant", content: [{ type: "text", text }], api: "anthropic-messages", provider: "anthropic",
          model: "m", usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2,
          cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, stopReason: "stop", timestamp: Date.now() };
    const line = JSON.stringify({ type: "message", id, parentId: parent, timestamp: new Date().toISOString(), message });
    lines.push(line);
    size += line.length + 1;
    parent = id;
  }
  // Compacted near its end, as a long session is: the model gets the summary and the
  // last entries, the file keeps everything.
  const kept = JSON.parse(lines[lines.length - 2]).id;
  lines.push(JSON.stringify({ type: "compaction", id: "c0ffee00", parentId: parent, timestamp: new Date().toISOString(),
    summary: "Earlier: a long conversation.", firstKeptEntryId: kept, tokensBefore: Math.round(size / 4) }));
  return lines.join("\n") + "\n";
}

function open(url) {
  return new Promise((ok, fail) => {
    const ws = new WebSocket(url.replace("http", "ws"));
    ws.onopen = () => ok(ws);
    ws.onerror = fail;
  });
}

const quantile = (xs, q) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

/** One measurement against the build in `build`. */
async function measure(build) {
  const script = [{ text: "first answer" }, { text: "second answer" }];
  const { url, tmp } = await startPicogent(script, {}, build);
  const dir = join(tmp, ".picogent/sessions");
  mkdirSync(dir, { recursive: true });
  const body = bigSession(join(tmp, "work"));
  writeFileSync(join(dir, "big.jsonl"), body);

  const [a, b] = [await open(url), await open(url)];
  // The prober: one frame in flight at a time, the round trip of each.
  const trips = [];
  let probing = true;
  const probed = new Promise((done) => {
    let sent = 0;
    b.onmessage = () => {
      trips.push(performance.now() - sent);
      if (!probing) return done();
      setTimeout(() => { sent = performance.now(); b.send('{"type":"refused-on-purpose"}'); }, 2);
    };
    sent = performance.now();
    b.send('{"type":"refused-on-purpose"}');
  });
  await new Promise((r) => setTimeout(r, 200));
  const before = trips.length;
  const t0 = performance.now();
  let firstDone = null, history = null, finished = 0;
  const all = new Promise((done) => {
    a.onmessage = (e) => {
      const f = JSON.parse(e.data);
      if (f.type === "history" && history === null) history = performance.now() - t0;
      if (f.type === "done" && f.id !== "h1") {
        if (firstDone === null) firstDone = performance.now() - t0;
        finished++;
      }
      if (finished === 2 && history !== null) done();
    };
  });
  a.send(JSON.stringify({ id: "p1", content: "hello", sessionId: "big", keepAlive: true }));
  a.send(JSON.stringify({ id: "h1", sessionId: "big", type: "history" }));
  a.send(JSON.stringify({ id: "p2", content: "again", sessionId: "big", keepAlive: true }));
  await all;
  const wall = performance.now() - t0;
  probing = false;
  await probed;
  a.close(); b.close();
  stopAll();
  return { wall, firstDone, history, during: trips.slice(before), size: body.length, entries: body.split("\n").length - 2 };
}

const runs = against ? [[`before (${againstName})`, await measure(against)]] : [];
runs.push(["this build", await measure(target)]);

const f = (x) => (x === null ? "—" : x.toFixed(1) + " ms");
const cell = (r) => [
  f(r.wall) + ` (first answer ${f(r.firstDone)}, history ${f(r.history)})`,
  f(Math.max(...r.during)),
  `${f(quantile(r.during, 0.99))} / ${f(quantile(r.during, 0.5))}`,
];
const head = `| build | two prompts and a history in a ${(runs[0][1].size / 1e6).toFixed(1)} MB session (${runs[0][1].entries} entries), until all three are answered | another connection's round trip meanwhile: longest | p99 / p50 |`;
const rows = runs.map(([name, r]) => [name, ...cell(r)]);
const table = [head, "|---|---|---|---|", ...rows.map((r) => `| ${r.join(" | ")} |`)].join("\n");
emit({
  title: "A long session's load and other connections",
  script: "bench/bigsession.mjs",
  command: "node --experimental-websocket bench/bigsession.mjs [MB] [--against DIR] --record",
  body: table + "\n",
  record,
});
