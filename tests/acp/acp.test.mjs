// `picogent acp` driven as an editor drives it: the Agent Client Protocol's own
// TypeScript client library (@agentclientprotocol/sdk) over the child's stdin and
// stdout, against the scripted model; real files, real commands, real sessions.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, existsSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const target = process.env.CARGO_TARGET_DIR || join(root, "target");
const bin = (name) => join(target, "debug", name);
const children = [];
after(() => { for (const c of children) c.kill("SIGKILL"); });

/** The scripted model with `script`, and a fresh home with a working folder. */
async function setup(script) {
  const tmp = mkdtempSync(join(tmpdir(), "picogent-acp-"));
  const work = join(tmp, "work");
  mkdirSync(work);
  writeFileSync(join(work, "notes.txt"), "hello from the notes\n");
  writeFileSync(join(tmp, "script.json"), JSON.stringify(script));
  const llm = spawn(bin("examples/scripted_llm"), [join(tmp, "script.json")], { stdio: ["ignore", "pipe", "inherit"] });
  children.push(llm);
  const addr = await new Promise((ok, fail) => {
    createInterface({ input: llm.stdout }).once("line", (l) => ok(l.split(" ").pop()));
    llm.once("exit", (c) => fail(new Error("scripted_llm exited: " + c)));
  });
  return { tmp, work, env: {
    PATH: process.env.PATH, HOME: tmp, RUST_LOG: "warn",
    PICOGENT_PROVIDER: "anthropic", PICOGENT_BASE_URL: "http://" + addr, PICOGENT_API_KEY: "test-key",
  } };
}

/** `picogent acp` and an editor's connection to it: every update kept, permission
 * requests answered by `permit` (the option's id to choose, or null to cancel), every
 * stdout line kept to check that nothing but protocol messages is there. */
function editor(env, { permit = () => "allow_once", cwd } = {}) {
  const child = spawn(bin("picogent"), ["acp"], { cwd, env, stdio: ["pipe", "pipe", "pipe"] });
  children.push(child);
  let stderr = "";
  child.stderr.on("data", (d) => { stderr += d; });
  const raw = [];
  const [mine, theirs] = Readable.toWeb(child.stdout).tee();
  (async () => {
    const dec = new TextDecoder(); let buf = "";
    for await (const chunk of theirs) {
      buf += dec.decode(chunk, { stream: true });
      let i; while ((i = buf.indexOf("\n")) >= 0) { raw.push(buf.slice(0, i)); buf = buf.slice(i + 1); }
    }
  })();
  const updates = [], asked = [];
  const app = acp.client({ name: "test-editor" })
    .onNotification(acp.methods.client.session.update, ({ params }) => { updates.push(params); })
    .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
      asked.push(params);
      const choice = await permit(params);
      return choice ? { outcome: { outcome: "selected", optionId: choice } } : { outcome: { outcome: "cancelled" } };
    });
  const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), mine);
  return { child, updates, asked, raw, stderr: () => stderr, run: (op) => app.connectWith(stream, op) };
}

async function init(ctx) {
  return ctx.request(acp.methods.agent.initialize, { protocolVersion: acp.PROTOCOL_VERSION, clientCapabilities: {} });
}

const kinds = (updates) => updates.map((u) => u.update.sessionUpdate);
const text = (updates, kind) => updates.filter((u) => u.update.sessionUpdate === kind).map((u) => u.update.content.text).join("");

test("an editor's session: initialize, session/new in its folder, a prompt streamed as updates with kinds, diffs and outputs, end_turn", async () => {
  const { work, env } = await setup([
    { text: "Looking.", tool: "bash", args: { command: "echo to-stdout; echo to-stderr >&2; cat notes.txt" } },
    { text: "Writing.", tool: "write", args: { path: "a.txt", content: "A\nB\n" } },
    { tool: "edit", args: { path: "a.txt", oldText: "B", newText: "C" } },
    { text: "All done." },
  ]);
  const ed = editor(env, { cwd: tmpdir() });
  await ed.run(async (ctx) => {
    const hello = await init(ctx);
    assert.equal(hello.protocolVersion, 1);
    assert.equal(hello.agentCapabilities.loadSession, true);
    assert.equal(hello.agentCapabilities.promptCapabilities.embeddedContext, true);
    assert.equal(hello.agentCapabilities.mcpCapabilities.http, true);
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    const done = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "Do the work" }] });
    assert.equal(done.stopReason, "end_turn");
    assert.ok(ed.updates.every((u) => u.sessionId === sessionId));
    assert.equal(text(ed.updates, "agent_message_chunk"), "Looking.Writing.All done.");
    const calls = ed.updates.filter((u) => u.update.sessionUpdate === "tool_call").map((u) => u.update);
    assert.deepEqual(calls.map((c) => c.kind), ["execute", "edit", "edit"]);
    assert.deepEqual(calls[1].locations, [{ path: join(work, "a.txt") }]);
    const ends = ed.updates.filter((u) => u.update.sessionUpdate === "tool_call_update" && u.update.status).map((u) => u.update)
      .filter((u) => u.status === "completed" || u.status === "failed");
    assert.deepEqual(ends.map((u) => u.status), ["completed", "completed", "completed"]);
    const output = ends[0].content.map((c) => c.content?.text).join("");
    assert.match(output, /to-stdout/);
    assert.match(output, /hello from the notes/);
    const written = ends[1].content.find((c) => c.type === "diff");
    assert.equal(written.path, join(work, "a.txt"));
    assert.equal(written.oldText ?? null, null, "a new file has no old text");
    assert.equal(written.newText, "A\nB\n");
    const edited = ends[2].content.find((c) => c.type === "diff");
    assert.equal(edited.oldText, "A\nB\n");
    assert.equal(edited.newText, "A\nC\n");
    assert.equal(readFileSync(join(work, "a.txt"), "utf8"), "A\nC\n");
  });
  // Standard output held protocol messages alone, whatever the command printed.
  for (const line of ed.raw) assert.equal(JSON.parse(line).jsonrpc, "2.0", line);
  assert.ok(!ed.raw.some((l) => l.includes("to-stdout") && !l.startsWith("{")));
});

test("a malformed line and an unknown method get JSON-RPC errors and the agent keeps serving; a prompt for no session is refused", async () => {
  const { work, env } = await setup([{ text: "Still here." }]);
  const child = spawn(bin("picogent"), ["acp"], { env, stdio: ["pipe", "pipe", "inherit"] });
  children.push(child);
  const lines = createInterface({ input: child.stdout });
  const got = [];
  const waiters = [];
  lines.on("line", (l) => { got.push(JSON.parse(l)); for (const w of waiters.splice(0)) w(); });
  const next = async (pred) => {
    for (;;) {
      const m = got.find(pred); if (m) return m;
      await new Promise((r) => waiters.push(r));
    }
  };
  const send = (o) => child.stdin.write((typeof o === "string" ? o : JSON.stringify(o)) + "\n");
  send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } });
  await next((m) => m.id === 1);
  send("this is not json {");
  assert.equal((await next((m) => m.error && m.error.code === -32700)).id, null);
  send({ jsonrpc: "2.0", id: 2, method: "picogent/no_such_method", params: {} });
  assert.equal((await next((m) => m.id === 2)).error.code, -32601);
  send({ jsonrpc: "2.0", id: 3, method: "session/prompt", params: { sessionId: "nope", prompt: [{ type: "text", text: "hi" }] } });
  assert.match((await next((m) => m.id === 3)).error.message, /no session/);
  send({ jsonrpc: "2.0", id: 4, method: "session/new", params: { cwd: "relative/folder", mcpServers: [] } });
  assert.match((await next((m) => m.id === 4)).error.message, /absolute/);
  send({ jsonrpc: "2.0", id: 5, method: "session/new", params: { cwd: work, mcpServers: [] } });
  const sessionId = (await next((m) => m.id === 5)).result.sessionId;
  send({ jsonrpc: "2.0", id: 6, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "still there?" }] } });
  assert.equal((await next((m) => m.id === 6)).result.stopReason, "end_turn");
  child.stdin.end();
});

test("embedded resources and resource links reach the model", async () => {
  const { work, env } = await setup([{ text: "Seen." }]);
  const ed = editor(env);
  await ed.run(async (ctx) => {
    await init(ctx);
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [
      { type: "text", text: "Explain this" },
      { type: "resource", resource: { uri: "file:///src/lib.rs", text: "fn secret_sauce() {}", mimeType: "text/rust" } },
      { type: "resource_link", uri: "file:///src/main.rs", name: "main.rs" },
    ] });
  });
  const session = readdirSync(join(dirname(work), ".picogent", "sessions"))[0];
  const stored = readFileSync(join(dirname(work), ".picogent", "sessions", session), "utf8");
  assert.match(stored, /secret_sauce/);
  assert.match(stored, /file:\/\/\/src\/main.rs/);
});

test("session/cancel kills the running command and ends the turn as cancelled", async () => {
  const { work, env } = await setup([
    { tool: "bash", args: { command: "echo started > started.txt; sleep 30; echo finished > finished.txt" } },
    { text: "never" },
  ]);
  const ed = editor(env);
  await ed.run(async (ctx) => {
    await init(ctx);
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    const turn = ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "take long" }] });
    while (!existsSync(join(work, "started.txt"))) await new Promise((r) => setTimeout(r, 20));
    const t0 = Date.now();
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await turn).stopReason, "cancelled");
    assert.ok(Date.now() - t0 < 20000);
  });
  assert.equal(existsSync(join(work, "finished.txt")), false);
});

test("a cancel sent right behind its prompt still cancels it, and the session takes the next prompt", async () => {
  // Cancelled before its first model call: the one answer scripted is the next prompt's.
  const { work, env } = await setup([{ text: "Next one." }]);
  const ed = editor(env);
  await ed.run(async (ctx) => {
    await init(ctx);
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    const turn = ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "go" }] });
    await ctx.notify(acp.methods.agent.session.cancel, { sessionId });
    assert.equal((await turn).stopReason, "cancelled");
    // A prompt while another runs is refused; after it, the session goes on.
    const again = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "and now" }] });
    assert.equal(again.stopReason, "end_turn");
    assert.equal(text(ed.updates, "agent_message_chunk"), "Next one.");
  });
});

test("approval: ask makes each edit and command wait for session/request_permission; reject never runs and tells the model; always is remembered", async () => {
  const { work, env } = await setup([
    { tool: "bash", args: { command: "echo one > one.txt" } },
    { tool: "bash", args: { command: "echo two > two.txt" } },
    { tool: "write", args: { path: "w.txt", content: "x" } },
    { tool: "write", args: { path: "w2.txt", content: "y" } },
    { tool: "read", args: { path: "notes.txt" } },
    { text: "Done." },
  ]);
  const answers = ["allow_always", "reject_always"];
  const ed = editor({ ...env, PICOGENT_APPROVAL: "execute=ask,edit=ask" }, { permit: () => answers.shift() });
  await ed.run(async (ctx) => {
    await init(ctx);
    const { sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] });
    const done = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "work" }] });
    assert.equal(done.stopReason, "end_turn");
  });
  // Asked once for bash (then always allowed), once for write (then always rejected),
  // never for the read.
  assert.equal(ed.asked.length, 2);
  assert.deepEqual(ed.asked[0].options.map((o) => o.kind), ["allow_once", "allow_always", "reject_once", "reject_always"]);
  assert.match(ed.asked[0].toolCall.title, /echo one/);
  assert.ok(existsSync(join(work, "one.txt")) && existsSync(join(work, "two.txt")));
  assert.ok(!existsSync(join(work, "w.txt")) && !existsSync(join(work, "w2.txt")));
  const failed = ed.updates.filter((u) => u.update.status === "failed").map((u) => u.update.content.map((c) => c.content?.text).join(""));
  assert.equal(failed.length, 2);
  assert.match(failed[0], /rejects every write call/);
});

test("session/load replays a stored session as updates and continues it", async () => {
  const { work, env } = await setup([
    { text: "First answer.", tool: "bash", args: { command: "echo remembered" } },
    { text: "Noted." },
    { text: "Second answer." },
  ]);
  let sessionId;
  const first = editor(env);
  await first.run(async (ctx) => {
    await init(ctx);
    ({ sessionId } = await ctx.request(acp.methods.agent.session.new, { cwd: work, mcpServers: [] }));
    await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "Remember this" }] });
  });
  first.child.kill();
  const second = editor(env);
  await second.run(async (ctx) => {
    await init(ctx);
    await ctx.request(acp.methods.agent.session.load, { sessionId, cwd: work, mcpServers: [] });
    assert.deepEqual(kinds(second.updates), ["user_message_chunk", "agent_message_chunk", "tool_call", "tool_call_update", "agent_message_chunk"]);
    assert.equal(text(second.updates, "user_message_chunk"), "Remember this");
    second.updates.length = 0;
    const done = await ctx.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text: "And now?" }] });
    assert.equal(done.stopReason, "end_turn");
    assert.equal(text(second.updates, "agent_message_chunk"), "Second answer.");
    await assert.rejects(ctx.request(acp.methods.agent.session.load, { sessionId: "no-such-session", cwd: work, mcpServers: [] }), /no session/);
  });
  const stored = readFileSync(join(dirname(work), ".picogent", "sessions", sessionId + ".jsonl"), "utf8");
  assert.match(stored, /Remember this[\s\S]*And now\?/);
});

test("a pi session loads by pi's id, replays and continues in pi's own file", async () => {
  const { tmp, work, env } = await setup([{ text: "Continued in pi's file." }]);
  const uuid = "0b5e7a52-6a3c-4e0e-9d3f-2f1c7c9d8e11";
  const dir = join(tmp, ".pi", "agent", "sessions", "--work--");
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `2026-01-01T00-00-00-000Z_${uuid}.jsonl`);
  const lines = [
    { type: "session", version: 3, id: uuid, timestamp: "2026-01-01T00:00:00.000Z", cwd: work },
    { type: "message", id: "a1", parentId: null, timestamp: "2026-01-01T00:00:00.000Z",
      message: { role: "user", content: [{ type: "text", text: "Asked in pi" }], timestamp: 1 } },
    { type: "message", id: "a2", parentId: "a1", timestamp: "2026-01-01T00:00:01.000Z",
      message: { role: "assistant", content: [{ type: "text", text: "Answered in pi" }], api: "anthropic-messages", provider: "anthropic", model: "m",
        usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
        stopReason: "stop", timestamp: 2 } },
  ];
  writeFileSync(file, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  const ed = editor(env);
  await ed.run(async (ctx) => {
    await init(ctx);
    await ctx.request(acp.methods.agent.session.load, { sessionId: uuid, cwd: work, mcpServers: [] });
    assert.equal(text(ed.updates, "user_message_chunk"), "Asked in pi");
    assert.equal(text(ed.updates, "agent_message_chunk"), "Answered in pi");
    assert.ok(ed.updates.every((u) => u.sessionId === uuid));
    await assert.rejects(ctx.request(acp.methods.agent.session.load, { sessionId: uuid.slice(0, 8), cwd: work, mcpServers: [] }), /no session/);
    const done = await ctx.request(acp.methods.agent.session.prompt, { sessionId: uuid, prompt: [{ type: "text", text: "Go on" }] });
    assert.equal(done.stopReason, "end_turn");
  });
  assert.match(readFileSync(file, "utf8"), /Go on[\s\S]*Continued in pi's file/);
});

test("an editor that goes away mid-run: the run is cancelled, its command killed, its session written, and picogent exits", async () => {
  const { tmp, work, env } = await setup([
    { tool: "bash", args: { command: "echo started > started.txt; sleep 30; echo finished > finished.txt" } },
    { text: "never" },
  ]);
  const child = spawn(bin("picogent"), ["acp"], { env, stdio: ["pipe", "pipe", "inherit"] });
  children.push(child);
  const lines = createInterface({ input: child.stdout });
  const got = [];
  let wake = () => {};
  lines.on("line", (l) => { got.push(JSON.parse(l)); wake(); });
  const next = async (pred) => { for (;;) { const m = got.find(pred); if (m) return m; await new Promise((r) => { wake = r; }); } };
  const send = (o) => child.stdin.write(JSON.stringify(o) + "\n");
  send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: 1, clientCapabilities: {} } });
  await next((m) => m.id === 1);
  send({ jsonrpc: "2.0", id: 2, method: "session/new", params: { cwd: work, mcpServers: [] } });
  const sessionId = (await next((m) => m.id === 2)).result.sessionId;
  send({ jsonrpc: "2.0", id: 3, method: "session/prompt", params: { sessionId, prompt: [{ type: "text", text: "take long" }] } });
  while (!existsSync(join(work, "started.txt"))) await new Promise((r) => setTimeout(r, 20));
  const exited = new Promise((r) => child.once("exit", r));
  child.stdin.end();
  await exited;
  assert.equal(existsSync(join(work, "finished.txt")), false);
  const stored = readFileSync(join(tmp, ".picogent", "sessions", sessionId + ".jsonl"), "utf8");
  assert.match(stored, /"toolResult"/, "the cancelled call's result is in the session");
});
