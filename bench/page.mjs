// client.html through a long run, in real Chromium against picogent's chat mode and
// the scripted model: STEPS bash steps (each with its checkpoint), then a Markdown
// answer of KB kilobytes, in a server holding SESSIONS other sessions. Measured in the
// page, while the run streams in and again after a reload (the page rebuilt from
// `history`): the longest main-thread task (PerformanceObserver "longtask"), how many
// tasks took over 50 ms, how long after the answer's last fragment it was all shown,
// the DOM's element count and the JS heap after a garbage collection; and the sessions
// list: its first page shown, a search answered, every session listed.
//
//   node bench/page.mjs [steps] [runs] [--kb N] [--sessions N] [--record]
//                       (defaults: 300 steps, 3 runs, a 35 KB answer, 200 sessions;
//                        --record also records the table in bench/RESULTS.md)
//
// It prints each run as it ends on stderr, then the Markdown section on stdout. It needs
// what the browser test needs (tests/browser's npm packages, Debian's chromium) and the
// built binaries: `cargo build --bin picogent --example scripted_llm`, or with
// PICOGENT_PROFILE=release the release ones (under $CARGO_TARGET_DIR when it is set).
import { writeFileSync, mkdtempSync, mkdirSync, utimesSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { startPicogent, launchChromium, stopAll, target } from "../tests/browser/harness.mjs";
import { answer } from "./answer.mjs";
import { cli, emit } from "./report.mjs";

const { record, args } = cli();
/** `--name value` among the arguments (removed from them), else `dflt`. */
function opt(name, dflt) { const i = args.indexOf(name); if (i < 0) return dflt; const v = Number(args[i + 1]); args.splice(i, 2); return v; }
const kb = opt("--kb", 35), sessions = opt("--sessions", 200);
const steps = Number(args[0] || 300);
const runs = Number(args[1] || 3);
const profile = process.env.PICOGENT_PROFILE || "debug";

/** The page's figures now; `since` drops long tasks from before that time. */
function measure(page, since) {
  return page.evaluate((since) => {
    window.gc?.();
    const long = window.__long.filter((t) => t.start >= since).map((t) => t.duration);
    return {
      longest: Math.round(Math.max(0, ...long)),
      over50: long.length,
      elements: document.getElementsByTagName("*").length,
      heapMB: performance.memory ? +(performance.memory.usedJSHeapSize / 1048576).toFixed(1) : null,
    };
  }, since);
}

/** `n` sessions as pi writes them, a day apart, some long (a few hundred entries). */
function sessionFiles(dir, n) {
  mkdirSync(dir, { recursive: true });
  for (let i = 0; i < n; i++) {
    const id = `bench-${String(i).padStart(4, "0")}`;
    const lines = [{ type: "session", version: 3, id, timestamp: "2026-01-01T00:00:00.000Z", cwd: "/work" }];
    let parent = null;
    const entries = i % 10 === 0 ? 400 : 4;
    for (let k = 0; k < entries; k++) {
      const user = k % 2 === 0;
      const eid = String(k + 1).padStart(8, "0");
      lines.push({ type: "message", id: eid, parentId: parent, timestamp: "2026-01-01T00:00:00.000Z",
        message: user ? { role: "user", content: [{ type: "text", text: `Question ${i}.${k}: fix the parser for case ${i}` }], timestamp: 1 }
          : { role: "assistant", content: [{ type: "text", text: "An answer. ".repeat(40) }], api: "anthropic-messages", provider: "anthropic", model: "m",
            usage: { input: 1, output: 1, cacheRead: 0, cacheWrite: 0, totalTokens: 2, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } }, stopReason: "stop", timestamp: 2 } });
      parent = eid;
    }
    const path = join(dir, id + ".jsonl");
    writeFileSync(path, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
    const t = Date.now() / 1000 - (i + 1) * 86400;
    utimesSync(path, t, t);
  }
}

/** The sessions list: its first page shown after a load, a search answered, all listed. */
async function sessionList(page) {
  const t0 = Date.now();
  await page.reload();
  await page.waitForFunction((n) => document.querySelectorAll("#session-list .item").length >= n, Math.min(sessions, 100));
  const first = Date.now() - t0;
  const t1 = Date.now();
  await page.fill("#session-search", "case 123");
  await page.waitForFunction(() => [...document.querySelectorAll("#session-list .item")].length === 1).catch(async (e) => {
    console.error(await page.locator("#session-list li").allTextContents()); throw e;
  });
  const search = Date.now() - t1;
  await page.fill("#session-search", "");
  await page.waitForFunction((n) => document.querySelectorAll("#session-list .item").length >= n, Math.min(sessions, 100));
  const t2 = Date.now();
  while (await page.locator("#session-list button.more").count()) {
    const have = await page.locator("#session-list .item").count();
    await page.locator("#session-list button.more").click();
    await page.waitForFunction((n) => document.querySelectorAll("#session-list .item").length > n, have);
  }
  const all = Date.now() - t2;
  return { first, search, all, listed: await page.locator("#session-list .item").count() };
}

async function once(browser) {
  const script = [];
  for (let i = 0; i < steps; i++) script.push({ tool: "bash", args: { command: `echo step ${i}` } });
  script.push({ text: answer(kb) });
  const cfgDir = mkdtempSync(join(tmpdir(), "picogent-bench-page-"));
  writeFileSync(join(cfgDir, "agent.json"), JSON.stringify({ max_steps: steps + 10 }));
  const { url } = await startPicogent(script, { PICOGENT_CONFIG: join(cfgDir, "agent.json") });
  sessionFiles(join(cfgDir, "sessions"), sessions); // the agent home is the config's folder
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  await page.addInitScript(() => {
    window.__long = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push({ start: e.startTime, duration: e.duration }); })
      .observe({ type: "longtask", buffered: true });
  });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  // When the answer's last fragment came: the frame before `done`.
  await page.evaluate(() => app.ws.addEventListener("message", (m) => {
    if (m.data.includes('"type":"text"')) { window.__lastText = performance.now(); window.__firstText ??= window.__lastText; }
  }));
  const sent = await page.evaluate(() => performance.now());
  const t0 = Date.now();
  await page.fill("#input", "Run the long job");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const box = document.querySelector(".msg.assistant");
    if (!box || box.dataset.state !== "done" || !box.textContent.includes("THE-END")) return false;
    window.__shown ??= performance.now();
    return true;
  }, null, { timeout: 600000, polling: "raf" });
  const took = Date.now() - t0;
  const afterLast = await page.evaluate(() => window.__shown - window.__lastText);
  // PROFILE=1: each long task, and whether it came while the steps or the answer streamed.
  if (process.env.PROFILE) console.error(await page.evaluate(() => window.__long.map((t) => `${Math.round(t.duration)} ms ${t.start < window.__firstText ? "steps" : "answer"}`).join(", ")));
  const shown = await page.locator(".step").count();
  if (shown !== steps) throw new Error(`${shown} steps shown, ${steps} expected`);
  const live = await measure(page, sent);
  await page.reload();
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 60000 });
  await page.waitForFunction(() => document.querySelector(".msg.assistant")?.textContent.includes("THE-END"));
  const reloaded = await measure(page, 0);
  const list = await sessionList(page);
  await page.close();
  stopAll();
  return { took, live, reloaded, afterLast, list };
}

const loadBefore = loadavg()[0];
const browser = await launchChromium(["--enable-precise-memory-info", "--js-flags=--expose-gc"]);
const chromium = browser.version();
const rows = [];
try {
  console.error(`${steps} steps and a ${kb} KB answer among ${sessions} sessions, ${runs} runs`);
  for (let i = 1; i <= runs; i++) {
    const { took, live, reloaded, afterLast, list } = await once(browser);
    const f = (m) => `${m.longest} ms, ${m.over50}, ${m.elements}, ${m.heapMB} MB`;
    console.error(`run ${i}: took ${(took / 1000).toFixed(1)} s; shown ${afterLast.toFixed(0)} ms after the last fragment; live: ${f(live)}; reloaded: ${f(reloaded)}; sessions: ${JSON.stringify(list)}`);
    const n = (x) => x.toLocaleString("en-US");
    rows.push(`| ${i} | ${(took / 1000).toFixed(1)} s | ${afterLast.toFixed(0)} ms | ${live.longest} ms · ${live.over50} | ${reloaded.longest} ms · ${reloaded.over50} `
      + `| ${n(live.elements)} / ${n(reloaded.elements)} | ${live.heapMB} / ${reloaded.heapMB} MB | ${list.first} / ${list.search} / ${list.all} ms (${list.listed}) |`);
  }
} finally {
  await browser.close();
  stopAll();
}
const body = [
  "| run | run took | answer shown after its last fragment | live: longest task · tasks > 50 ms | after reload: longest task · tasks > 50 ms | elements (live / reloaded) | JS heap (live / reloaded) | sessions: first page / a search / all listed |",
  "|---|---|---|---|---|---|---|---|",
  ...rows,
  "",
  `picogent's chat mode (the \`${profile}\` build) against the scripted model: ${steps} \`bash\` steps (each with its`,
  `checkpoint), then a ${answer(kb).length.toLocaleString("en-US")}-byte Markdown answer, in a server holding ${sessions} other sessions (a tenth`,
  "of them 400 entries long); measured in the page while the run streams in, and",
  "again after a reload (the page rebuilt from `history`). Longest main-thread task from",
  "PerformanceObserver `longtask`; elements `getElementsByTagName(\"*\")`; heap `usedJSHeapSize`",
  `after a garbage collection. Chromium ${chromium} headless; picogent, the scripted model and Chromium`,
  `share the machine's cores while the run streams (load average ${loadBefore.toFixed(1)} before the first run, ${loadavg()[0].toFixed(1)} after the last).`,
].join("\n");
const env = process.env.PICOGENT_PROFILE ? `PICOGENT_PROFILE=${process.env.PICOGENT_PROFILE} ` : "";
emit({
  title: `Browser: a ${steps}-step run, a ${kb >= 1024 ? kb / 1024 + " MB" : kb + " KB"} answer and ${sessions} sessions in client.html`,
  script: "bench/page.mjs",
  command: `${env}node bench/page.mjs ${steps} ${runs} --kb ${kb} --sessions ${sessions}${record ? " --record" : ""}`,
  bin: join(target, profile, "picogent"),
  body,
  record,
});
