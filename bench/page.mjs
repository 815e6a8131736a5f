// client.html through a long run, in real Chromium against picogent's chat mode and
// the scripted model: STEPS bash steps (each with its checkpoint), then a 35 KB
// Markdown answer. Measured in the page, while the run streams in and again after a
// reload (the page rebuilt from `history`): the longest main-thread task
// (PerformanceObserver "longtask"), how many tasks took over 50 ms, and once it is all
// shown, the DOM's element count and the JS heap after a garbage collection.
//
//   node bench/page.mjs [steps] [runs]            (defaults: 300 steps, 3 runs)
//   node bench/page.mjs [steps] [runs] --record   also records the table in
//                                                 bench/RESULTS.md (bench/report.mjs)
//
// It prints each run as it ends on stderr, then the Markdown section on stdout. It needs
// what the browser test needs (tests/browser's npm packages, Debian's chromium) and the
// built binaries: `cargo build --bin picogent --example scripted_llm`, or with
// PICOGENT_PROFILE=release the release ones (under $CARGO_TARGET_DIR when it is set).
import { writeFileSync, mkdtempSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { startPicogent, launchChromium, stopAll, target } from "../tests/browser/harness.mjs";
import { answer } from "./answer.mjs";
import { cli, emit } from "./report.mjs";

const { record, args } = cli();
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

async function once(browser) {
  const script = [];
  for (let i = 0; i < steps; i++) script.push({ tool: "bash", args: { command: `echo step ${i}` } });
  script.push({ text: answer() });
  const cfgDir = mkdtempSync(join(tmpdir(), "picogent-bench-page-"));
  writeFileSync(join(cfgDir, "agent.json"), JSON.stringify({ max_steps: steps + 10 }));
  const { url } = await startPicogent(script, { PICOGENT_CONFIG: join(cfgDir, "agent.json") });
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  await page.addInitScript(() => {
    window.__long = [];
    new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push({ start: e.startTime, duration: e.duration }); })
      .observe({ type: "longtask", buffered: true });
  });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  const sent = await page.evaluate(() => performance.now());
  const t0 = Date.now();
  await page.fill("#input", "Run the long job");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 600000 });
  const took = Date.now() - t0;
  const shown = await page.locator(".step").count();
  if (shown !== steps) throw new Error(`${shown} steps shown, ${steps} expected`);
  const live = await measure(page, sent);
  await page.reload();
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 60000 });
  await page.waitForFunction(() => document.querySelector(".msg.assistant")?.textContent.includes("THE-END"));
  const reloaded = await measure(page, 0);
  await page.close();
  stopAll();
  return { took, live, reloaded };
}

const loadBefore = loadavg()[0];
const browser = await launchChromium(["--enable-precise-memory-info", "--js-flags=--expose-gc"]);
const chromium = browser.version();
const rows = [];
try {
  console.error(`${steps} steps and a 35 KB answer, ${runs} runs`);
  for (let i = 1; i <= runs; i++) {
    const { took, live, reloaded } = await once(browser);
    const f = (m) => `${m.longest} ms, ${m.over50}, ${m.elements}, ${m.heapMB} MB`;
    console.error(`run ${i}: took ${(took / 1000).toFixed(1)} s; live: ${f(live)}; reloaded: ${f(reloaded)}`);
    const n = (x) => x.toLocaleString("en-US");
    rows.push(`| ${i} | ${(took / 1000).toFixed(1)} s | ${live.longest} ms · ${live.over50} | ${reloaded.longest} ms · ${reloaded.over50} `
      + `| ${n(live.elements)} / ${n(reloaded.elements)} | ${live.heapMB} / ${reloaded.heapMB} MB |`);
  }
} finally {
  await browser.close();
  stopAll();
}
const body = [
  "| run | run took | live: longest task · tasks > 50 ms | after reload: longest task · tasks > 50 ms | elements (live / reloaded) | JS heap (live / reloaded) |",
  "|---|---|---|---|---|---|",
  ...rows,
  "",
  `picogent's chat mode (the \`${profile}\` build) against the scripted model: ${steps} \`bash\` steps (each with its`,
  `checkpoint), then a ${answer().length.toLocaleString("en-US")}-byte Markdown answer; measured in the page while the run streams in, and`,
  "again after a reload (the page rebuilt from `history`). Longest main-thread task from",
  "PerformanceObserver `longtask`; elements `getElementsByTagName(\"*\")`; heap `usedJSHeapSize`",
  `after a garbage collection. Chromium ${chromium} headless; picogent, the scripted model and Chromium`,
  `share the machine's cores while the run streams (load average ${loadBefore.toFixed(1)} before the first run, ${loadavg()[0].toFixed(1)} after the last).`,
].join("\n");
const env = process.env.PICOGENT_PROFILE ? `PICOGENT_PROFILE=${process.env.PICOGENT_PROFILE} ` : "";
emit({
  title: `Browser: a ${steps}-step run and a 35 KB answer in client.html`,
  script: "bench/page.mjs",
  command: `${env}node bench/page.mjs ${steps} ${runs}${record ? " --record" : ""}`,
  bin: join(target, profile, "picogent"),
  body,
  record,
});
