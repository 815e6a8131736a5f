// Drives client.html in headless Chromium against `picogent` in chat mode, which talks
// to the tests' scripted model server. Run by scripts/test.sh after `cargo build`.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, readdirSync, existsSync, mkdirSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { join, dirname } from "node:path";
import { root, target, startPicogent, launchChromium, stopAll } from "./harness.mjs";

let browser;

before(async () => {
  browser = await launchChromium();
});

after(async () => {
  if (browser) await browser.close();
  stopAll();
});

test("a message streams an answer with a tool step, rendered safely, and finishes", async () => {
  const answer = "The notes say **hello**.\n\n```sh\necho hi\n```\n\nRaw <b>html</b> and <img src=x onerror=\"window.pwned=1\"> stay text.";
  const { url } = await startPicogent([
    { tool: "read", args: { path: "notes.txt" } },
    { text: answer },
  ]);
  const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "What do the notes say?");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });

  assert.equal(await page.textContent(".msg.user"), "What do the notes say?");
  assert.equal(await page.textContent(".step summary .label"), "Read: notes.txt");
  assert.equal(await page.getAttribute(".step", "data-state"), "done");
  await page.click(".step summary");
  assert.match(await page.textContent(".step .body"), /hello from the notes/);
  assert.equal(await page.locator(".step.error").count(), 0);
  assert.equal(await page.textContent(".msg.assistant .md strong"), "hello");
  assert.equal(await page.textContent(".codeblock code"), "echo hi");
  assert.equal(await page.locator(".codeblock button.copy").count(), 1);
  const text = await page.textContent(".msg.assistant");
  assert.match(text, /Raw <b>html<\/b> and <img src=x/);
  assert.equal(await page.locator(".msg.assistant b, .msg.assistant img").count(), 0);
  assert.equal(await page.evaluate(() => window.pwned), undefined);
  assert.match(await page.textContent("#session-id"), /^session \S+/);
  assert.equal(await page.isHidden("#stop"), true);

  const shot = process.env.SCREENSHOT_PATH || join(target, "browser/chat.png");
  mkdirSync(dirname(shot), { recursive: true });
  await page.screenshot({ path: shot });
  await page.close();
});

test("Stop cancels a running request and the tool step shows the error", async () => {
  const { url } = await startPicogent([{ tool: "bash", args: { command: "sleep 20" } }]);
  const page = await browser.newPage({ viewport: { width: 420, height: 700 } }); // a narrow window
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Wait a while");
  await page.press("#input", "Enter");
  await page.waitForSelector('.step[data-state="running"] summary');
  assert.equal(await page.textContent(".step summary .label"), "Bash: sleep 20");
  await page.click(".step summary");
  assert.equal(await page.textContent(".step .body pre.term"), "$ sleep 20");
  const sent = [];
  page.on("websocket", () => {});
  await page.evaluate(() => { const orig = WebSocket.prototype.send; WebSocket.prototype.send = function (d) { (window.sent ||= []).push(JSON.parse(d)); return orig.call(this, d); }; });
  // Stop asks the run to end after its step, keeping the work; a second click cancels now.
  await page.click("#stop");
  await page.waitForSelector('.notice:text-is("stopping after the current step")');
  await page.click("#stop");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 10000 });
  // Ended by a person: said plainly, not as a failure.
  assert.match(await page.textContent(".msg.assistant .notice.stopped"), /Stopped/);
  assert.equal(await page.locator(".msg.assistant .error-line").count(), 0);
  assert.deepEqual((await page.evaluate(() => window.sent)).map((f) => f.type).filter((t) => t !== "sessions"), ["stop", "cancel"]);
  assert.equal(await page.locator('.step[data-state="aborted"], .step.error').count(), 1);
  await page.close();
});

test("pause, instruct and resume; then branch from a checkpoint and compare the branches", async () => {
  const { url, tmp } = await startPicogent([
    { tool: "write", args: { path: "f.txt", content: "A\n" } },
    { tool: "bash", args: { command: "sleep 1" } },
    { tool: "write", args: { path: "f.txt", content: "B\n" } },
    { text: "Done: f.txt says B." },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  page.on("console", (m) => { if (m.type() === "error") console.log("PAGE:", m.text()); });
  page.on("pageerror", (e) => console.log("PAGE:", e.message));
  page.on("dialog", () => assert.fail("the page must not use window.prompt"));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Make f.txt");
  await page.press("#input", "Enter");
  await page.waitForSelector('.step summary .label:text-is("Bash: sleep 1")');
  await page.click("#pause");
  await page.waitForSelector('.notice:text-is("paused: waiting before the next step")');
  assert.equal(await page.textContent("#pause"), "Resume");
  await page.fill("#instruction", "Prefer small steps");
  await page.press("#instruction", "Enter"); // Enter sends it, acknowledged at once
  await page.waitForSelector('.notice.queued:text-is("instruction queued for the next step: Prefer small steps")');
  // Branch from the checkpoint after step 1, with an instruction and a name, asked in the page.
  await stepAction(page, 1, "branch");
  await page.fill('#modal textarea[name="content"]', "Use B instead");
  await page.fill('#modal input[name="name"]', "try-b");
  await page.click("#modal button.ok");
  await page.waitForSelector('.notice:text-is("rolled back to step 1")');
  assert.equal(readFileSync(join(tmp, "work/f.txt"), "utf8"), "A\n");
  // The steps after the checkpoint are greyed out and their buttons inert.
  assert.ok(await page.locator('.step.rolled-back').count() >= 1);
  assert.equal(await page.locator('.stepline[data-step="2"].rolled-back button:enabled').count(), 0);
  await page.click("#pause"); // Resume
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.equal(readFileSync(join(tmp, "work/f.txt"), "utf8"), "B\n");
  const notices = await page.locator(".notice").allTextContents();
  assert.ok(notices.includes("instruction: Prefer small steps"), notices.join(" | "));
  assert.ok(notices.includes("instruction: Use B instead"), notices.join(" | "));
  assert.match(await page.textContent(".msg.assistant .md"), /f\.txt says B/);

  await page.click("#compare");
  await page.waitForSelector("#compare-view .branch-list");
  const branches = await page.locator("#compare-view .branch-list li").allTextContents();
  assert.deepEqual(branches.map((b) => b.split(" · ")[0]), ["main", "try-b"]);
  await page.click("#compare-go");
  await page.waitForSelector('#compare-view h3:has-text("Compare")');
  assert.match(await page.textContent("#compare-view h3"), /Compare main and try-b/);
  assert.match(await page.textContent("#compare-view pre"), /-A[\s\S]*\+B/);
  // The compare view fits the window: its Close button is visible without scrolling.
  assert.ok(await page.locator("#compare-view button.close").isVisible());
  const box = await page.locator("#compare-view").boundingBox();
  assert.ok(box.y + box.height <= 760, JSON.stringify(box));
  await page.click('#compare-view button.better:text-is("try-b is better")');
  await page.fill('#modal input[name="note"]', "B is what we wanted");
  await page.click("#modal button.ok");
  await page.waitForSelector('.notice:text-is("preference recorded")');
  await page.close();
});

test("a reload mid-run shows the history, reattaches and the run finishes; Markdown renders right", async () => {
  const md = "Run `test_greet.py` with snake_case_name.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- outer\n  - inner\n\n---\n\nSee [docs](https://example.com/a_(b)) and ~~old~~.\n\n- [x] done";
  const { url } = await startPicogent([
    { tool: "write", args: { path: "f.txt", content: "A\n" } },
    { text: "first" },
    { tool: "bash", args: { command: "sleep 1.5; echo slept" } },
    { text: md },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "one");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.fill("#input", "two");
  await page.press("#input", "Enter");
  await page.waitForSelector('.step[data-state="running"] .label:text-is("Bash: sleep 1.5; echo slept")');
  await page.reload();
  // History from the server: the first exchange with its diff step, then the running request.
  await page.waitForSelector('.msg.user:text-is("one")');
  await page.waitForSelector('.msg.user:text-is("two")');
  await page.click('.step .label:text-is("Write: f.txt")');
  assert.match(await page.textContent(".step .diff .add"), /\+A/);
  await page.waitForSelector('.msg.assistant[data-state="done"] >> nth=1', { timeout: 20000 });
  const last = page.locator(".msg.assistant").nth(1);
  await last.locator(".step summary").last().click();
  assert.match(await last.locator(".step .term").last().textContent(), /slept/);
  assert.match(await last.locator(".step .exit").textContent(), /exit code 0/);
  assert.equal(await last.locator(".md p code").first().textContent(), "test_greet.py");
  assert.match(await last.locator(".md p").first().textContent(), /snake_case_name/);
  assert.equal(await last.locator(".md table td").count(), 2);
  assert.equal(await last.locator(".md ul ul li").textContent(), "inner");
  assert.equal(await last.locator(".md hr").count(), 1);
  assert.equal(await last.locator(".md a").first().getAttribute("href"), "https://example.com/a_(b)");
  assert.equal(await last.locator(".md del").textContent(), "old");
  assert.equal(await last.locator('.md li.task input[type="checkbox"]').isChecked(), true);
  // New during nothing running starts a new session; the old one stays in the list.
  const old = (await page.textContent("#session-id")).replace("session ", "");
  await page.click("#new-session");
  assert.equal(await page.textContent("#session-id"), "new session");
  assert.ok(await page.locator(`#session-list .item[data-id="${old}"]`).count() === 1);
  await page.close();
});

test("a person labels a step and rates the run; export --format annotations lists them", async () => {
  const { url, tmp } = await startPicogent([
    { tool: "write", args: { path: "g.txt", content: "wrong\n" } },
    { tool: "bash", args: { command: "true" } },
    { text: "Done." },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  page.on("dialog", () => assert.fail("the page must not use window.prompt"));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Make g");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  const session = (await page.textContent("#session-id")).replace("session ", "");
  await page.click('.step .label:text-is("Write: g.txt")');
  await page.click('.step[data-tool="write"] button.label-incorrect');
  assert.equal(await page.getAttribute('.step[data-tool="write"]', "data-label"), "incorrect");
  // With no step focused, Alt+A approves the newest step (the bash one).
  await page.evaluate(() => document.activeElement.blur());
  await page.keyboard.press("Alt+KeyA");
  assert.equal(await page.getAttribute('.step[data-tool="bash"]', "data-label"), "correct");
  await page.click(".msg.assistant .rate-partial");
  // The dialog is named, keeps Tab inside, closes on Escape and gives the focus back.
  const name = await page.evaluate(() => { const c = document.querySelector("#modal .card"); return document.getElementById(c.getAttribute("aria-labelledby")).textContent; });
  assert.equal(name, "Rate this run: partial");
  for (let i = 0; i < 12; i++) await page.keyboard.press("Tab");
  assert.equal(await page.evaluate(() => !!document.activeElement.closest("#modal")), true);
  await page.keyboard.press("Escape");
  assert.equal(await page.isHidden("#modal"), true);
  assert.equal(await page.evaluate(() => document.activeElement.classList.contains("rate-partial")), true);
  await page.click(".msg.assistant .rate-partial");
  await page.fill('#modal textarea[name="note"]', "half right");
  await page.click("#modal button.ok");
  assert.equal(await page.getAttribute(".msg.assistant .rate-partial", "aria-pressed"), "true");
  let rows = [];
  for (let i = 0; i < 100 && rows.length < 3; i++) {
    await new Promise((r) => setTimeout(r, 100));
    const out = await new Promise((ok, fail) => {
      const p = spawn(join(target, "debug/picogent"), ["export", "--session", session, "--format", "annotations"],
        { cwd: join(tmp, "work"), env: { PATH: process.env.PATH, HOME: tmp }, stdio: ["ignore", "pipe", "inherit"] });
      let s = ""; p.stdout.on("data", (d) => (s += d)); p.on("exit", () => ok(s)); p.on("error", fail);
    });
    rows = out.split("\n").filter(Boolean).map((l) => JSON.parse(l));
  }
  assert.deepEqual(rows.map((r) => [r.kind, r.label ?? r.rating]), [["step_label", "incorrect"], ["step_label", "correct"], ["run_rating", "partial"]]);
  assert.equal(rows[0].content.args_summary, "Write: g.txt");
  assert.equal(rows[2].note, "half right");
  // After a reload the labels and the rating are shown again, from the history.
  await page.reload();
  await page.waitForSelector('.msg.assistant[data-state="done"] .rate-partial');
  assert.equal(await page.getAttribute('.step[data-tool="write"]', "data-label"), "incorrect");
  assert.equal(await page.getAttribute('.step[data-tool="bash"]', "data-label"), "correct");
  assert.equal(await page.getAttribute(".msg.assistant .rate-partial", "aria-pressed"), "true");
  await page.close();
});

test("a refused handshake shows its reason, and a token admits the page", async () => {
  const { url } = await startPicogent([{ text: "in" }], { PICOGENT_CHAT_TOKEN: "tok-123" });
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  let sockets = 0;
  page.on("websocket", () => sockets++);
  await page.goto(url);
  await page.waitForSelector('#status-detail:text-is("token required")', { timeout: 10000 });
  assert.notEqual(await page.getAttribute("#status", "data-state"), "open");
  assert.equal(await page.isVisible("#token"), true, "the settings open with the token field");
  assert.equal(await page.evaluate(() => document.activeElement.id), "token");
  // A refusal is not retried on its own (backoff would have tried twice by now)...
  await new Promise((r) => setTimeout(r, 3500));
  assert.equal(sockets, 1, "no endless retry of a refused token");
  // ...but Try again does, and is refused again.
  await page.click("#retry");
  await page.waitForSelector('#status-detail:text-is("token required")');
  assert.equal(sockets, 2);
  await page.fill("#token", "tok-123");
  await page.press("#token", "Tab"); // its change reconnects at once
  await page.waitForSelector('#status[data-state="open"]', { timeout: 20000 });
  await page.fill("#input", "hello");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.match(await page.textContent(".msg.assistant .md"), /in/);
  // The model and the working folder in force are shown, from the run itself.
  assert.match(await page.textContent("#context"), /model: claude-[\w.-]+/);
  assert.match(await page.textContent("#context"), /folder: \/.*work/);
  await page.close();
  // A link carrying the token admits a fresh page, and the token leaves the address bar.
  const linked = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await linked.goto(url + "?token=tok-123");
  await linked.waitForSelector('#status[data-state="open"]', { timeout: 20000 });
  assert.equal(await linked.evaluate(() => location.search), "");
  await linked.close();
});

test("a page from another origin is refused and shows why", async () => {
  const { url } = await startPicogent([{ text: "never" }]);
  // The same page, served from another origin (another port of this machine).
  const other = createHttpServer(async (req, res) => {
    const got = await fetch(new URL(req.url, url));
    res.writeHead(got.status, { "content-type": got.headers.get("content-type") }); res.end(Buffer.from(await got.arrayBuffer()));
  });
  await new Promise((ok) => other.listen(0, "127.0.0.1", ok));
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  const server = url.replace("http://", "ws://") + "ws";
  await page.addInitScript((ws) => localStorage.setItem("picogent.server", JSON.stringify(ws)), server);
  await page.goto(`http://127.0.0.1:${other.address().port}/`);
  await page.waitForSelector('#status-detail:text-is("origin not allowed: set PICOGENT_ALLOWED_ORIGINS")', { timeout: 10000 });
  assert.notEqual(await page.getAttribute("#status", "data-state"), "open");
  assert.equal(await page.isDisabled("#send"), true);
  await page.close();
  other.close();
});

test("New during a run sends the next message into a new session", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "sleep 2" } },
    { text: "second answer" },
    { text: "first done" },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.evaluate(() => { const orig = WebSocket.prototype.send; WebSocket.prototype.send = function (d) { (window.sent ||= []).push(JSON.parse(d)); return orig.call(this, d); }; });
  await page.fill("#input", "first");
  await page.press("#input", "Enter");
  await page.waitForSelector('.step[data-state="running"] .label:text-is("Bash: sleep 2")');
  const old = (await page.textContent("#session-id")).replace("session ", "");
  await page.click("#new-session");
  assert.equal(await page.textContent("#session-id"), "new session");
  await page.fill("#input", "second");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.match(await page.textContent(".msg.assistant .md"), /second answer/);
  const frame = (await page.evaluate(() => window.sent)).find((f) => f.content === "second");
  assert.equal(frame.sessionId, undefined, JSON.stringify(frame));
  const now = (await page.textContent("#session-id")).replace("session ", "");
  assert.notEqual(now, old);
  assert.deepEqual(await page.locator(".msg.user").allTextContents(), ["second"]);
  await page.close();
});

test("after a run has finished, Rollback previews the files, restores them, and the next message continues there", async () => {
  const { url, tmp } = await startPicogent([
    { tool: "write", args: { path: "f.txt", content: "A\n" } },
    { tool: "write", args: { path: "new.txt", content: "N\n" } },
    { tool: "write", args: { path: "f.txt", content: "B\n" } },
    { text: "Done: f.txt says B." },
    { text: "Continued from A." },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  page.on("dialog", () => assert.fail("the page must not use window dialogs"));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Make f.txt");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.equal(readFileSync(join(tmp, "work/f.txt"), "utf8"), "B\n");
  await stepAction(page, 1, "rollback");
  // Named as the page numbers steps.
  assert.equal(await page.textContent("#modal h3"), "Roll back to after step 1?");
  // The confirmation lists the files the rollback puts back, from the checkpoint's diff.
  await page.waitForSelector("#modal .preview-files li");
  const files = await page.locator("#modal .preview-files li").allTextContents();
  assert.equal(files.length, 2, files.join(" | "));
  assert.match(files[0], /^f\.txt · modified: restored \(\+1 −1\)$/);
  assert.match(files[1], /^new\.txt · created since: deleted/);
  assert.equal(readFileSync(join(tmp, "work/f.txt"), "utf8"), "B\n", "the preview changes nothing");
  await page.click("#modal button.ok");
  await page.waitForSelector('.notice:text-is("rolled back to step 1")');
  assert.equal(readFileSync(join(tmp, "work/f.txt"), "utf8"), "A\n");
  assert.equal(existsSync(join(tmp, "work/new.txt")), false);
  // What came after the checkpoint is greyed out and inert.
  assert.equal(await page.locator(".step.rolled-back").count(), 2);
  assert.equal(await page.locator(".rolled-back button:enabled").count(), 0);
  assert.equal(await page.locator('.stepline[data-step="1"]:not(.rolled-back) button.rollback:enabled').count(), 1);
  await page.fill("#input", "Go on");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"] >> nth=1', { timeout: 20000 });
  assert.match(await page.locator(".msg.assistant").nth(1).textContent(), /Continued from A/);
  // A reload shows the same: the rolled-back steps greyed and inert, then what followed.
  await page.reload();
  await page.waitForSelector('.msg.user:text-is("Go on")');
  await page.waitForSelector('.msg.assistant[data-state="done"] >> nth=1');
  assert.equal(await page.locator(".step.rolled-back").count(), 2);
  assert.equal(await page.locator('.step.rolled-back .label:text-is("Write: new.txt")').count(), 1);
  assert.equal(await page.locator(".rolled-back button:enabled").count(), 0);
  await page.close();
});

test("an answer whose single blocks are longer than a frame's budget streams to the end and finishes", async () => {
  const code = Array.from({ length: 80 }, (_, i) => `const line${i} = "${"x".repeat(40)}"; // ${i}`).join("\n");
  const table = "| n | square | note |\n|---|---|---|\n" +
    Array.from({ length: 60 }, (_, i) => `| ${i} | ${i * i} | row ${i} of the table, with some words |`).join("\n");
  const list = Array.from({ length: 60 }, (_, i) => `- item ${i}: ${"words ".repeat(8)}`).join("\n");
  const answer = "Here is the file:\n\n```js\n" + code + "\n```\n\n" + table + "\n\n" + list + "\n\nAll done.";
  const { url } = await startPicogent([{ text: answer }, { text: "Second answer." }]);
  const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Show me everything");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  const codeText = await page.textContent(".msg.assistant .codeblock code");
  assert.equal(codeText.split("\n").filter((l) => l.startsWith("const line")).length, 80);
  assert.match(codeText, /line79 /);
  assert.equal(await page.locator(".msg.assistant table tbody tr").count(), 60);
  assert.equal(await page.locator(".msg.assistant ul > li").count(), 60);
  assert.match(await page.textContent(".msg.assistant"), /All done\./);
  assert.equal(await page.locator(".msg.assistant .codeblock button.copy").count(), 1);
  assert.equal(await page.isHidden("#stop"), true);
  // The next message is not "queued" behind an answer that never ended.
  await page.fill("#input", "And then?");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"] >> nth=1', { timeout: 20000 });
  assert.equal(await page.locator(".queued").count(), 0);
  assert.match(await page.textContent('.msg.assistant >> nth=1'), /Second answer\./);
  await page.close();
});

test("a failed step shows its error once, steps keep their durations after a reload, Copy separates paragraphs, entities render", async () => {
  const { url } = await startPicogent([
    { text: "First I look.", tool: "bash", args: { command: "sleep 1.2; echo slept" } },
    { tool: "read", args: { path: "missing.txt" } },
    { text: "Tom &amp; Jerry &lt;3 &#x2713; and `&amp;` in code." },
  ]);
  const context = await browser.newContext({ viewport: { width: 900, height: 640 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: url.replace(/\/$/, "") });
  const page = await context.newPage();
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Go");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  const check = async () => {
    const failed = page.locator(".step.error");
    assert.equal(await failed.count(), 1);
    // Its body is built when it is opened.
    if ((await failed.getAttribute("open")) === null) await failed.locator("summary").click();
    const titles = await failed.locator(".body .k").allTextContents();
    assert.equal(titles.filter((t) => t === "error").length, 1, JSON.stringify(titles));
    assert.equal(titles.filter((t) => t === "output").length, 0, JSON.stringify(titles));
    const bashTime = await page.locator(".step").first().locator(".time").textContent();
    assert.match(bashTime, /^(1|1\.\d|2) s$/, bashTime);
    const md = await page.locator(".msg.assistant .md").last().textContent();
    assert.match(md, /Tom & Jerry <3 ✓ and &amp; in code\./);
    // One line per step: its output's last line (a failure's first), and how it went in words.
    assert.equal(await page.locator(".step").first().locator("summary .tail").textContent(), "slept");
    assert.match(await failed.locator("summary .tail").textContent(), /missing\.txt/);
    assert.equal(await failed.locator("summary .st .sr-only").textContent(), "failed: ");
  };
  await check();
  // f jumps to the failed step.
  await page.locator("body").click({ position: { x: 5, y: 5 } });
  await page.keyboard.press("f");
  assert.equal(await page.evaluate(() => document.activeElement.closest(".step").classList.contains("error")), true);
  await page.click(".msg.assistant .copy-answer");
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  assert.match(copied, /^First I look\.\n\nTom &amp; Jerry/);
  // After a reload, the same from the session's history.
  await page.reload();
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await check();
  await context.close();
});

test("rollback waits for a pause, Pause says pausing at once, Escape in a field never stops, Stop is not a failure, keys label the focused step", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "sleep 1.5; echo one" } },
    { tool: "bash", args: { command: "sleep 1.5; echo two" } },
    { tool: "bash", args: { command: "sleep 1.5; echo three" } },
    { text: "never reached" },
  ]);
  const page = await browser.newPage({ viewport: { width: 900, height: 640 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Go");
  await page.press("#input", "Enter");
  await page.waitForSelector('.step[data-state="running"]', { timeout: 20000 });
  await page.waitForSelector(".msg.assistant .marker", { state: "attached" });
  // A screen reader is told to wait for the answer, not read each fragment.
  assert.equal(await page.getAttribute("#thread", "aria-busy"), "true");
  // Running and not paused: no checkpoint offers a rollback or a branch.
  assert.equal(await page.locator(".msg.assistant .marker button:not([disabled])").count(), 0);
  await page.click("#pause");
  assert.equal(await page.textContent("#pause"), "Pausing…");
  assert.equal(await page.isDisabled("#pause"), true);
  await page.waitForSelector('.msg.assistant[data-paused="true"]', { timeout: 20000 });
  assert.ok(await page.locator(".msg.assistant .marker button:not([disabled])").count() > 0);
  assert.equal(await page.textContent("#pause"), "Resume");
  // Escape while typing leaves the field; the run is still there.
  await page.fill("#input", "a draft");
  await page.press("#input", "Escape");
  assert.equal(await page.evaluate(() => document.activeElement.id), "");
  assert.equal(await page.getAttribute(".msg.assistant", "data-state"), "running");
  assert.equal(await page.inputValue("#input"), "a draft");
  await page.click("#pause"); // resume
  await page.waitForSelector('.msg.assistant[data-paused="false"]');
  // Escape closes the shortcuts' help, and stops nothing while it does.
  await page.keyboard.press("?");
  assert.equal(await page.isHidden("#shortcuts"), false);
  await page.keyboard.press("Escape");
  assert.equal(await page.isHidden("#shortcuts"), true);
  assert.equal(await page.getAttribute(".msg.assistant", "data-state"), "running");
  await page.keyboard.press("Escape"); // not in a field: stop
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.equal(await page.locator(".msg.assistant .notice.stopped").count(), 1);
  assert.equal(await page.getAttribute("#thread", "aria-busy"), "false");
  assert.equal(await page.locator(".msg.assistant .error-line").count(), 0);
  // Keyboard verdicts: j focuses the first step, r labels it (not the newest).
  const steps = page.locator(".step");
  assert.ok(await steps.count() >= 2);
  await page.locator("body").click({ position: { x: 5, y: 5 } });
  await page.keyboard.press("j");
  await page.keyboard.press("r");
  await page.waitForFunction(() => document.querySelector(".step").dataset.label === "incorrect");
  assert.equal(await steps.last().getAttribute("data-label"), null);
  // Alt+A while typing in the message box labels nothing.
  await page.focus("#input");
  await page.keyboard.press("Alt+KeyA");
  assert.equal(await steps.last().getAttribute("data-label"), null);
  // The progress of labelling is shown; n goes to the next step without a label.
  const total = await steps.count();
  assert.equal(await page.textContent("#labelled > span"), `labelled 1 of ${total} steps · 0 ✓ 1 ✗ 0 ?`);
  await page.locator("body").click({ position: { x: 5, y: 5 } });
  await page.keyboard.press("n");
  assert.equal(await page.evaluate(() => [...document.querySelectorAll(".step")].indexOf(document.activeElement.closest(".step"))), 1);
  await page.keyboard.press("a");
  await page.waitForSelector(`#labelled > span:text-is("labelled 2 of ${total} steps · 1 ✓ 1 ✗ 0 ?")`);
  // The shortcuts are listed.
  await page.click("#show-shortcuts");
  assert.match(await page.textContent("#shortcuts"), /j \/ k/);
  await page.close();
});

test("two tabs on one session: a turn sent in one appears and streams in the other", async () => {
  const { url } = await startPicogent([{ text: "Answer to the first tab." }, { text: "Answer to the second tab." }]);
  const context = await browser.newContext({ viewport: { width: 900, height: 640 } });
  const a = await context.newPage();
  await a.goto(url);
  await a.waitForSelector('#status[data-state="open"]');
  await a.fill("#input", "From tab A");
  await a.press("#input", "Enter");
  await a.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  // Tab B opens the same session (it is the stored one), then A sends again.
  const b = await context.newPage();
  await b.goto(url);
  await b.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await a.fill("#input", "Again from A");
  await a.press("#input", "Enter");
  await b.waitForSelector('.msg.user:text-is("Again from A")', { timeout: 10000 });
  await b.waitForSelector('.msg.assistant[data-state="done"] >> nth=1', { timeout: 20000 });
  assert.match(await b.textContent(".msg.assistant >> nth=1"), /Answer to the second tab\./);
  assert.equal(await b.locator(".msg.user").count(), 2);
  assert.equal(await b.isHidden("#stop"), true);
  await context.close();
});

test("a command's output shows while it runs, its newest line on the step, then the full output", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "echo first; sleep 2; echo second" } },
    { text: "Ran it." },
  ]);
  const page = await browser.newPage({ viewport: { width: 1000, height: 760 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "run it");
  await page.press("#input", "Enter");
  // Folded, the step's line shows the newest output line; opened, the output so far.
  await page.waitForSelector('.step[data-state="running"] summary .tail:text-is("first")', { timeout: 10000 });
  await page.click('.step[data-state="running"] summary');
  await page.waitForSelector('.step[data-state="running"] pre.live:has-text("first")');
  assert.equal(await page.locator(".step pre.live:has-text('second')").count(), 0, "not before it is printed");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  assert.equal(await page.locator(".step pre.live").count(), 0, "the live view gives way to the output");
  assert.match(await page.textContent(".step pre.term >> nth=-1"), /first\s+second/);
  assert.equal(await page.textContent(".step summary .tail"), "second");
  await page.close();
});

test("the sessions sidebar: titles by day, search, keyboard, a rename stored in the session file, a drawer at 390 px", async () => {
  const { url, tmp } = await startPicogent([{ text: "One." }, { text: "Two." }]);
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  assert.equal(await page.isVisible("#sidebar"), true, "beside the conversation on a wide screen");
  await page.fill("#input", "# Fix **the** `parser` bug");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.click("#new-session");
  await page.fill("#input", "Another question");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.waitForSelector("#session-list .item >> nth=1");
  // Titles as typed, Markdown marks and all.
  assert.deepEqual(await page.locator("#session-list .item .t").allTextContents(), ["Another question", "# Fix **the** `parser` bug"]);
  assert.equal(await page.textContent("#session-list .day"), "Today");
  assert.match(await page.locator("#session-list .item .d").first().textContent(), /\d{1,2}:\d{2}/);
  assert.equal(await page.getAttribute("#session-list .item >> nth=0", "aria-current"), "true");
  // Keyboard only: / searches, Enter opens the first match.
  await page.evaluate(() => document.activeElement.blur());
  await page.keyboard.press("/");
  assert.equal(await page.evaluate(() => document.activeElement.id), "session-search");
  // Enter at once: the first match of what was typed, once the server answered.
  await page.keyboard.type("parser");
  await page.keyboard.press("Enter");
  await page.waitForFunction(() => document.querySelectorAll("#session-list .item").length === 1);
  await page.waitForSelector('.msg.assistant:has-text("One.")', { timeout: 10000 });
  assert.equal(await page.evaluate(() => document.activeElement.id), "input");
  await page.fill("#session-search", "");
  // Rename: stored on the server, so a browser that never saw it shows it too.
  // Rename shows over the row's end when the pointer is on the row.
  await page.hover('#session-list .item[aria-current="true"]');
  await page.click('#session-list .item[aria-current="true"] button[aria-label^="Rename"]');
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute("aria-label")), "New name for # Fix **the** `parser` bug");
  await page.keyboard.press("Control+A");
  await page.keyboard.type("Parser fix");
  await page.keyboard.press("Enter");
  await page.waitForSelector('#session-list .item .t:text-is("Parser fix")');
  const other = await browser.newContext({ viewport: { width: 390, height: 760 } }); // a phone
  const phone = await other.newPage();
  await phone.goto(url);
  await phone.waitForSelector('#status[data-state="open"]');
  assert.equal(await phone.isHidden("#sidebar"), true, "a drawer on a phone, closed at first");
  await phone.click("#toggle-sidebar");
  assert.equal(await phone.evaluate(() => document.activeElement.id), "session-search");
  await phone.waitForSelector('#session-list .item .t:text-is("Parser fix")');
  assert.equal(await phone.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true);
  await phone.keyboard.press("Escape");
  assert.equal(await phone.isHidden("#sidebar"), true);
  assert.equal(await phone.evaluate(() => document.activeElement.id), "toggle-sidebar");
  await phone.click("#toggle-sidebar");
  await phone.click('#session-list .item .t:text-is("Parser fix")');
  assert.equal(await phone.isHidden("#sidebar"), true, "choosing a session closes the drawer");
  await phone.waitForSelector('.msg.assistant:has-text("One.")', { timeout: 10000 });
  // In the file as pi's /name stores it.
  const dir = join(tmp, ".picogent", "sessions");
  const named = readdirSync(dir).flatMap((f) => readFileSync(join(dir, f), "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l)))
    .filter((e) => e.type === "session_info");
  assert.deepEqual(named.map((e) => e.name), ["Parser fix"]);
  await other.close();
  await page.close();
});

/** Opens the step whose checkpoint is `step` (its body is built when opened) and
 * presses its `action` (rollback or branch). */
async function stepAction(page, step, action) {
  const line = page.locator(`.stepline[data-step="${step}"]:not(.rolled-back)`).last();
  const d = line.locator(".step");
  if ((await d.getAttribute("open")) === null) await d.locator("summary").click();
  await line.locator(`button.${action}`).click();
}

/** axe-core's WCAG 2.1 A/AA violations on the page as it is now, one line each. */
async function axeViolations(page) {
  await page.addScriptTag({ content: readFileSync(join(root, "tests/browser/node_modules/axe-core/axe.min.js"), "utf8") });
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] } });
    return r.violations.map((v) => v.id + ": " + v.nodes.slice(0, 4).map((n) => n.target.join(" ")).join(", "));
  });
  return found;
}

test("axe-core finds no WCAG A/AA violations, light or dark, wide or phone-width, dialog open", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "echo ok" } },
    { tool: "read", args: { path: "missing.txt" } },
    { tool: "bash", args: { command: "printf 'old line\\n' > x.txt" } },
    { tool: "edit", args: { path: "x.txt", edits: [{ oldText: "old line", newText: "new line" }] } },
    { text: "## Result\n\nA `code` span, a [link](https://example.com), and a table:\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```js\nconst x = 1;\n```\n- [x] done" },
  ]);
  // The page's own policy allows no inline script: axe-core is injected past it.
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 }, bypassCSP: true });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "Check things");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.click(".step summary >> nth=0");
  // An edit's diff, removed lines and added ones, is checked too.
  await page.click(".step summary >> nth=3");
  await page.waitForSelector(".diff .del");
  await page.click("#show-shortcuts");
  for (const colorScheme of ["light", "dark"]) {
    for (const viewport of [{ width: 1200, height: 800 }, { width: 390, height: 760 }]) {
      await page.emulateMedia({ colorScheme });
      await page.setViewportSize(viewport);
      const where = colorScheme + " " + viewport.width + " px";
      assert.deepEqual(await axeViolations(page), [], where);
      if (viewport.width < 500) {
        await page.click("#toggle-sidebar");
        assert.deepEqual(await axeViolations(page), [], where + ", sessions open");
        await page.keyboard.press("Escape");
      }
      await page.click(".msg.assistant .rate-success");
      assert.deepEqual(await axeViolations(page), [], where + ", a dialog open");
      await page.keyboard.press("Escape");
      // The verdict-and-note dialog (its choices), and Compare.
      await page.click(".step >> nth=0 >> button.label-note");
      assert.deepEqual(await axeViolations(page), [], where + ", the note dialog open");
      await page.keyboard.press("Escape");
      await page.click("#compare");
      await page.waitForSelector("#compare-view .branch-list");
      assert.deepEqual(await axeViolations(page), [], where + ", Compare open");
      await page.keyboard.press("Escape");
    }
  }
  await page.close();
});
