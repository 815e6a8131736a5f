// Workbench 3 in headless Chromium against picogent's chat mode: a megabyte answer, a
// phone, a year of sessions, and what a person checking a run's steps meets (one
// numbering, notes, the context after a reload, Compare by keyboard, the line under
// each step, Continue after max_steps).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { target, startPicogent, launchChromium, stopAll } from "./harness.mjs";

let browser;
before(async () => { browser = await launchChromium(); });
after(async () => { if (browser) await browser.close(); stopAll(); });

/** A page on `url`, connected. */
async function open(url, viewport = { width: 1280, height: 800 }) {
  const page = await browser.newPage({ viewport });
  page.on("dialog", () => assert.fail("the page must not use window dialogs"));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  return page;
}
async function ask(page, text) {
  await page.fill("#input", text);
  await page.press("#input", "Enter");
}
const done = (page, n = 0) => page.waitForSelector(`.msg.assistant[data-state="done"] >> nth=${n}`, { timeout: 60000 });
/** Opens a step's line (its body is built then). */
async function openStep(step) {
  if ((await step.getAttribute("open")) === null) await step.locator("summary").click();
}

test("a megabyte answer — prose and one long code block — is shown whole, parsed in linear work, laid out near the screen only", async () => {
  const prose = [];
  for (let i = 0; prose.join("").length < 512 * 1024; i++) {
    prose.push(`## Part ${i}\n\nThe function \`parse_${i}\` reads **bold** text.\n\n- point ${i}\n- another\n\n`);
  }
  const code = ["```python"];
  for (let i = 0; code.join("\n").length < 512 * 1024; i++) code.push(`def handler_${i}(event):  # step ${i}\n    return ${i}`);
  const text = prose.join("") + code.join("\n") + "\n```\n\nTHE-END";
  const { url } = await startPicogent([{ text }]);
  const page = await open(url);
  // Counts the lines the page's Markdown parser is given, wherever the page keeps it.
  await page.evaluate(() => {
    window.parsed = 0;
    const md = window.PicoMarkdown;
    const owner = md && md.blocks ? md : window;
    const blocks = owner.blocks;
    owner.blocks = function (lines) { window.parsed += lines.reduce((n, l) => n + l.length + 1, 0); return blocks.apply(this, arguments); };
  });
  await ask(page, "write a megabyte");
  await page.waitForFunction(() => {
    const box = document.querySelector(".msg.assistant");
    return box && box.dataset.state === "done" && box.textContent.includes("THE-END");
  }, null, { timeout: 120000, polling: 500 });
  const shown = await page.evaluate(() => document.querySelector(".msg.assistant .md").textContent.length);
  assert.ok(shown > 900 * 1024, "the whole answer is there: " + shown);
  assert.equal(await page.locator(".msg.assistant .md h2").count(), prose.length);
  assert.match(await page.locator(".msg.assistant .codeblock code").last().textContent(), /def handler_0\(event\)[\s\S]*return \d+\n?$/);
  // Linear work: the parser sees each character about once, not again at every frame.
  const parsed = await page.evaluate(() => window.parsed);
  assert.ok(parsed < 3 * text.length, `parsed ${parsed} characters for an answer of ${text.length}`);
  // The answer's final blocks are in chunks laid out only near the screen.
  const chunks = await page.evaluate(() => [...document.querySelectorAll(".msg.assistant .md > *")].map((c) => getComputedStyle(c).contentVisibility));
  assert.ok(chunks.length < prose.length / 10, `${chunks.length} children for ${prose.length * 3} blocks`);
  assert.ok(chunks.filter((v) => v === "auto").length >= chunks.length - 1, JSON.stringify(chunks.slice(0, 5)));
  await page.close();
});

test("at 390 px a step shows its command or file and its actions stay reachable; buttons never break inside a word", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "ls -la /srv/app/config && echo done" } },
    { tool: "write", args: { path: "src/config/parser.rs", content: "fn main() {}\n" } },
    { text: "Done." },
  ]);
  const page = await open(url, { width: 390, height: 760 });
  await ask(page, "Look");
  await done(page);
  for (const [n, want] of [[0, "Bash: ls -la /srv/app/config"], [1, "Write: src/config/parser.rs"]]) {
    const label = page.locator(".step summary .label").nth(n);
    // What the step does is on screen, not cut to a few characters.
    const seen = await label.evaluate((e, want) => {
      const r = document.createRange(); r.selectNodeContents(e);
      const box = e.getBoundingClientRect();
      // The characters of `want` that lie inside the label's visible box.
      let shownChars = 0;
      const text = e.firstChild;
      for (let i = 0; i < want.length; i++) {
        r.setStart(text, i); r.setEnd(text, i + 1);
        const c = r.getBoundingClientRect();
        if (c.right <= box.right + 0.5 && c.bottom <= box.bottom + 0.5) shownChars++;
      }
      return shownChars;
    }, want);
    assert.equal(seen, want.length, `${want}: ${seen} characters shown`);
  }
  const step = page.locator(".step").nth(1);
  await openStep(step);
  for (const sel of [".annot button", ".annot .k", ".after-step button", ".msg-actions button"]) {
    for (const b of await page.locator(sel).all()) {
      const lines = await b.evaluate((e) => { const r = document.createRange(); r.selectNodeContents(e); return new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size; });
      assert.equal(lines, 1, `${sel} "${await b.textContent()}" breaks over ${lines} lines`);
    }
  }
  assert.ok(await step.locator(".after-step button.rollback").isVisible());
  assert.equal(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth), true);
  await page.close();
});

/** A session file as pi writes it, last changed `daysAgo` days ago. */
function sessionFile(dir, id, prompt, daysAgo) {
  const lines = [
    { type: "session", version: 3, id, timestamp: "2026-01-01T00:00:00.000Z", cwd: "/work" },
    { type: "message", id: "00000001", parentId: null, timestamp: "2026-01-01T00:00:00.000Z",
      message: { role: "user", content: [{ type: "text", text: prompt }], timestamp: 1 } },
    { type: "message", id: "00000002", parentId: "00000001", timestamp: "2026-01-01T00:00:01.000Z",
      message: { role: "assistant", content: [{ type: "text", text: "Answer to " + id }], api: "anthropic-messages", provider: "anthropic", model: "m",
        usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } },
        stopReason: "stop", timestamp: 2 } },
  ];
  const path = join(dir, id + ".jsonl");
  writeFileSync(path, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
  const t = Date.now() / 1000 - daysAgo * 86400;
  utimesSync(path, t, t);
}

test("a year of sessions: every one reachable, searched on the server, titles as typed, one opened by its address", async () => {
  const { url, tmp } = await startPicogent([]);
  const dir = join(tmp, ".picogent", "sessions");
  mkdirSync(dir, { recursive: true });
  for (let i = 0; i < 260; i++) sessionFile(dir, `s${String(i).padStart(3, "0")}`, `routine question ${i}`, 1 + i * 1.4);
  sessionFile(dir, "oldest", "test_parse_config fails for C# files in ~/.config", 400);
  const page = await open(url);
  await page.waitForSelector("#session-list .item >> nth=99");
  // Older ones come a page at a time, to the very first: scrolled to the list's end, the
  // next page comes by itself; then the button asks for the last one. (The button is
  // pressed without scrolling it into view, or that scroll alone would load the page and
  // take the button away from under the click.)
  await page.locator("#session-list").evaluate((l) => { l.scrollTop = l.scrollHeight; });
  await page.waitForFunction(() => document.querySelectorAll("#session-list .item").length === 200);
  assert.equal(await page.locator('#session-list .item[data-id="oldest"]').count(), 0);
  await page.locator("#session-list button.more").dispatchEvent("click");
  await page.waitForSelector('#session-list .item[data-id="oldest"]');
  assert.equal(await page.locator("#session-list button.more").count(), 0);
  assert.equal(await page.locator("#session-list .item").count(), 261);
  assert.equal(await page.textContent('#session-list .item[data-id="oldest"] .t'), "test_parse_config fails for C# files in ~/.config");
  // A search finds what only the server has, as typed.
  await page.reload();
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#session-search", "~/.config");
  await page.waitForFunction(() => document.querySelectorAll("#session-list .item").length === 1);
  assert.equal(await page.getAttribute("#session-list .item", "data-id"), "oldest");
  await page.fill("#session-search", "parse_config");
  await page.waitForFunction(() => document.querySelector("#session-list .item")?.dataset.id === "oldest" && document.querySelectorAll("#session-list .item").length === 1);
  await page.fill("#session-search", "question 7");
  await page.waitForFunction(() => document.querySelectorAll("#session-list .item").length === 11); // 7, 70-79
  // An address names a session: a new tab opens it.
  const other = await open(url + "#session=s123");
  await other.waitForSelector('.msg.assistant:has-text("Answer to s123")');
  assert.equal(await other.textContent("#session-id"), "session s123");
  await other.click('#session-list .item[data-id="s000"] .open');
  await other.waitForSelector('.msg.assistant:has-text("Answer to s000")');
  assert.equal(await other.evaluate(() => location.hash), "#session=s000");
  await other.close();
  await page.close();
});

test("a session loaded mid-run stops showing it running when the run ends", async () => {
  const { url } = await startPicogent([{ tool: "bash", args: { command: "sleep 2; echo ok" } }, { text: "Finished." }]);
  const page = await open(url);
  await ask(page, "Take a while");
  await page.waitForSelector(".step");
  // The same session, loaded in another tab while it runs.
  const session = (await page.textContent("#session-id")).replace("session ", "");
  const second = await open(url + "#session=" + session);
  await second.waitForSelector("#session-list .item .t.running");
  await done(second);
  await second.waitForFunction(() => !document.querySelector("#session-list .running"), null, { timeout: 10000 });
  assert.equal(await second.isDisabled('#session-list .item[aria-current="true"] button[aria-label^="Delete"]'), false);
  await second.close();
  await page.close();
});

test("one numbering of steps: the line, its rollback, the annotation export and Compare agree; a note is chosen, saved and shown again", async () => {
  const { url, tmp } = await startPicogent([
    { text: "Looking first.", tool: "bash", args: { command: "echo one" } },
    { text: "Now writing.", tool: "write", args: { path: "a.txt", content: "A\n" } },
    { text: "And checking.", tool: "bash", args: { command: "cat a.txt" } },
    { text: "Done." },
    { tool: "bash", args: { command: "echo again" } },
    { text: "Again done." },
  ]);
  const page = await open(url);
  await ask(page, "Number things");
  await done(page);
  const steps = page.locator(".step");
  assert.deepEqual(await page.locator(".step .stepno").allTextContents(), ["step 1", "step 2", "step 3"]);
  const second = steps.nth(1);
  await openStep(second);
  await second.locator("button.rollback").click();
  assert.equal(await page.textContent("#modal h3"), "Roll back to after step 2?");
  await page.keyboard.press("Escape");
  // A verdict with a note: the three verdicts to choose from, the note shown at once.
  await second.locator("button.label-note").click();
  assert.equal(await page.locator('#modal input[type="radio"]').count(), 3);
  assert.equal(await page.locator('#modal input[type="text"]').count(), 0, "the verdict is chosen, not typed");
  await page.fill('#modal textarea[name="note"]', "wrote before reading");
  await page.check('#modal input[type="radio"][value="unsure"]');
  // Enter on the choice records it (and only it: the rollback asked before and
  // cancelled stays cancelled).
  await page.keyboard.press("Enter");
  await second.locator('.annot-note:has-text("wrote before reading")').waitFor();
  await second.locator('.saved:text-is("saved")').waitFor();
  assert.equal(await second.getAttribute("data-label"), "unsure");
  assert.equal(await page.locator('.notice:has-text("rolled back")').count(), 0, "no rollback from an earlier dialog");
  const session = (await page.textContent("#session-id")).replace("session ", "");
  const out = spawnSync(join(target, "debug/picogent"), ["export", "--session", session, "--format", "annotations"],
    { cwd: join(tmp, "work"), env: { PATH: process.env.PATH, HOME: tmp } });
  const rows = out.stdout.toString().split("\n").filter(Boolean).map((l) => JSON.parse(l));
  assert.deepEqual(rows.map((r) => [r.step, r.label, r.note]), [[2, "unsure", "wrote before reading"]]);
  await page.click("#compare");
  await page.waitForSelector("#compare-view .branch-list li");
  assert.equal(await page.textContent("#compare-view .branch-list li"), "main · 3 steps");
  // After a reload: the note again, and the context row with the model and tokens.
  await page.keyboard.press("Escape");
  await page.reload();
  await done(page);
  await openStep(page.locator(".step").nth(1));
  await page.locator(".step").nth(1).locator('.annot-note:has-text("wrote before reading")').waitFor();
  const context = await page.textContent("#context");
  assert.match(context, /model: \S+/);
  assert.match(context, /tokens: \d+ in/);
  assert.doesNotMatch(context, /server default/);
  // Rolled back to after step 1, the next step is step 2 again, as the export counts.
  const first = page.locator(".step").first();
  await openStep(first);
  await first.locator("button.rollback").click();
  await page.click("#modal button.ok");
  await page.waitForSelector('.notice:text-is("rolled back to step 1")');
  await ask(page, "Again");
  await done(page, 1);
  assert.equal(await page.locator(".step:not(.rolled-back) .stepno").last().textContent(), "step 2");
  await page.close();
});

test("Compare is a dialog: it takes the keyboard, keeps Tab inside, Escape closes it and gives the keyboard back", async () => {
  const { url } = await startPicogent([{ tool: "bash", args: { command: "echo x" } }, { text: "Done." }]);
  const page = await open(url);
  await ask(page, "Something");
  await done(page);
  await page.focus("#compare");
  await page.keyboard.press("Enter");
  await page.waitForSelector("#compare-view .branch-list");
  assert.equal(await page.evaluate(() => !!document.activeElement.closest("#compare-view")), true, "focus moves into it");
  for (let i = 0; i < 8; i++) {
    await page.keyboard.press("Tab");
    assert.equal(await page.evaluate(() => !!document.activeElement.closest("#compare-view")), true, "Tab stays inside");
  }
  assert.equal(await page.getAttribute("#compare-view", "role"), "dialog");
  await page.keyboard.press("Escape");
  assert.equal(await page.isHidden("#compare-view"), true);
  assert.equal(await page.evaluate(() => document.activeElement.id), "compare");
  assert.equal(await page.locator(".notice.stopped").count(), 0, "Escape closed the dialog and stopped nothing");
  await page.close();
});

test("titles use the sidebar's width; a long run's steps carry no buttons until opened; each step's line shows what matters", async () => {
  const script = [
    { tool: "bash", args: { command: "printf 'old line\\nkeep\\n' > x.txt" } },
    { tool: "edit", args: { path: "x.txt", edits: [{ oldText: "old line", newText: "new line" }] } },
    { tool: "bash", args: { command: "echo start; echo 'error: disk full' >&2; exit 3" } },
    { tool: "bash", args: { command: "seq 1 3000" } },
  ];
  for (let i = 0; i < 116; i++) script.push({ tool: "bash", args: { command: "echo " + i } });
  script.push({ text: "Done." });
  const { url } = await startPicogent(script, {}, target, { "agent.json": JSON.stringify({ max_steps: 200 }) });
  const page = await open(url);
  await ask(page, "A long title that a person typed to find this session again later");
  await done(page);
  assert.equal(await page.locator(".step").count(), 120);
  // Buttons: a handful for the answer and the start, none per step until one is opened.
  const buttons = await page.locator(".msg.assistant button").count();
  assert.ok(buttons < 20, buttons + " buttons for a 120-step run");
  const tails = await page.locator(".step summary .tail").allTextContents();
  assert.equal(tails[1], "+1 new line", "an edit: its changed line (numbered as the diff numbers it)");
  assert.equal(tails[2], "error: disk full", "a failed command: its error");
  assert.equal(tails[3], "3000", "a cut output: its last line, not the note");
  // The sidebar's title is not cut short by buttons it does not show.
  await page.mouse.move(900, 400);
  const { title, row } = await page.evaluate(() => {
    const item = document.querySelector("#session-list .item");
    return { title: item.querySelector(".t").getBoundingClientRect().width, row: item.getBoundingClientRect().width };
  });
  assert.ok(title > row * 0.8, `title ${title} px of a ${row} px row`);
  await page.close();
});

test("a run stopped by max_steps offers Continue, which goes on in the session rather than sending the prompt again", async () => {
  const { url } = await startPicogent([
    { tool: "bash", args: { command: "echo 1" } },
    { tool: "bash", args: { command: "echo 2" } },
    { text: "Carried on." },
  ], {}, target, { "agent.json": JSON.stringify({ max_steps: 2 }) });
  const page = await open(url);
  await ask(page, "Work until done");
  await done(page);
  assert.match(await page.textContent(".msg.assistant .error-line"), /max_steps/);
  assert.equal(await page.locator(".msg.assistant button.retry").count(), 0);
  await page.click(".msg.assistant button.continue");
  await done(page, 1);
  assert.deepEqual(await page.locator(".msg.user").allTextContents(), ["Work until done", "Continue where you left off."]);
  assert.match(await page.locator(".msg.assistant").nth(1).textContent(), /Carried on/);
  await page.close();
});
