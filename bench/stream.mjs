// Streaming cost of client.html in real Chromium: a long Markdown answer arrives as
// 16-character `text` frames over a real WebSocket, then `done`. Measured in the page:
// how long after its last fragment arrived the whole answer is shown, the longest
// main-thread task while it streams (PerformanceObserver "longtask"), the page's
// elements and its JS heap at the end.
//
//   node bench/stream.mjs [runs] [--kb N] [--rate KB/s] [--record]
//
// `--kb` is the answer's size (default 35 KB; 1024 for a megabyte), `--rate` how fast
// the server sends it (default: as fast as the socket carries it). It prints the
// Markdown section on stdout; `--record` also records it in bench/RESULTS.md
// (bench/report.mjs). It needs tests/browser's playwright-core and Debian's chromium,
// as the browser test does; CLIENT_DIR=path measures another version of the page (a
// folder holding client.html and client/), PROFILE=1 also prints (on stderr) the
// longest call of the page's frame handler, text flush and finish per run.
//
// The server here is a minimal WebSocket server (no picogent, no model): it serves the
// page and speaks only the frames the page needs, so the figure is the page's own.
import { createServer } from "node:http";
import { createHash } from "node:crypto";
import { readFileSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { answer, codeAnswer } from "./answer.mjs";
import { cli, emit } from "./report.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "tests/browser/package.json"));
const { chromium } = require("playwright-core");
const pageDir = process.env.CLIENT_DIR || root;
const { record, args: all } = cli();
/** `--name value` among the arguments (removed from them), else `dflt`. */
function opt(name, dflt) { const i = all.indexOf(name); if (i < 0) return dflt; const v = Number(all[i + 1]); all.splice(i, 2); return v; }
const kb = opt("--kb", 35), rate = opt("--rate", 0);
/** `--code`: the answer is one code block. */
const code = all.includes("--code"); if (code) all.splice(all.indexOf("--code"), 1);
const runs = Number(all[0] || 5);

/** A server WebSocket frame (text, unmasked). */
function frame(text) {
  const body = Buffer.from(text);
  const n = body.length;
  const head = n < 126 ? Buffer.from([0x81, n])
    : n < 65536 ? Buffer.from([0x81, 126, n >> 8, n & 255])
    : Buffer.concat([Buffer.from([0x81, 127]), (() => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; })()]);
  return Buffer.concat([head, body]);
}

/** Client frames (masked) out of `buf`: [texts, rest]. */
function readFrames(buf) {
  const out = [];
  for (;;) {
    if (buf.length < 2) break;
    let len = buf[1] & 127, off = 2;
    if (len === 126) { if (buf.length < 4) break; len = buf.readUInt16BE(2); off = 4; }
    else if (len === 127) { if (buf.length < 10) break; len = Number(buf.readBigUInt64BE(2)); off = 10; }
    if (buf.length < off + 4 + len) break;
    const mask = buf.subarray(off, off + 4), data = Buffer.from(buf.subarray(off + 4, off + 4 + len));
    for (let i = 0; i < data.length; i++) data[i] ^= mask[i % 4];
    if ((buf[0] & 15) === 1) out.push(data.toString());
    buf = buf.subarray(off + 4 + len);
  }
  return [out, buf];
}

const text = code ? codeAnswer(kb) : answer(kb);
/** The page and its files, as picogent serves them. */
const server = createServer((req, res) => {
  const path = new URL(req.url, "http://x").pathname;
  const file = path === "/" ? "client.html" : path.startsWith("/client/") && !path.includes("..") ? path.slice(1) : null;
  if (!file || !existsSync(join(pageDir, file))) { res.writeHead(404); res.end(); return; }
  const type = file.endsWith(".js") ? "text/javascript" : file.endsWith(".css") ? "text/css" : "text/html";
  res.writeHead(200, { "content-type": type }); res.end(readFileSync(join(pageDir, file)));
});
server.on("upgrade", (req, socket) => {
  const accept = createHash("sha1").update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest("base64");
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
  let buf = Buffer.alloc(0);
  socket.on("data", (d) => {
    let texts;
    [texts, buf] = readFrames(Buffer.concat([buf, d]));
    for (const t of texts) {
      const f = JSON.parse(t);
      if (f.type === "sessions") { socket.write(frame(JSON.stringify({ id: null, type: "sessions", content: [], sessionId: null }))); continue; }
      if (f.type || !f.content) continue;
      // A prompt: the answer in 16-character fragments, then done.
      let seq = 0;
      const chunks = [];
      for (let i = 0; i < text.length; i += 16) {
        chunks.push(frame(JSON.stringify({ id: f.id, type: "text", content: text.slice(i, i + 16), sessionId: "bench", seq: ++seq })));
      }
      chunks.push(frame(JSON.stringify({ id: f.id, type: "done", content: "", sessionId: "bench", seq: ++seq })));
      if (!rate) { socket.write(Buffer.concat(chunks)); continue; }
      // Paced: every 10 ms, the fragments due by then.
      const perTick = Math.max(1, Math.round((rate * 1024) / 16 / 100));
      let at = 0;
      const tick = setInterval(() => {
        socket.write(Buffer.concat(chunks.slice(at, at + perTick))); at += perTick;
        if (at >= chunks.length) clearInterval(tick);
      }, 10);
    }
  });
  socket.on("error", () => {});
});
await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
const url = `http://127.0.0.1:${server.address().port}/`;

const loadBefore = loadavg()[0];
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"],
});
const results = [];
for (let run = 0; run < runs; run++) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.evaluate(() => {
    window.bench = { longest: 0, tasks: 0, flush: 0, msg: 0, entries: [] };
    const wrap = (name) => { const f = window[name]; window[name] = function (...a) { const t = performance.now(); try { return f.apply(this, a); } finally { const d = performance.now() - t; window.bench[name] = Math.max(window.bench[name] || 0, d); } }; };
    wrap("flushText"); wrap("onFrame"); wrap("finish");
    new PerformanceObserver((l) => { for (const e of l.getEntries()) { window.bench.tasks++; window.bench.longest = Math.max(window.bench.longest, e.duration); window.bench.entries.push([Math.round(e.startTime), Math.round(e.duration)]); } })
      .observe({ type: "longtask", buffered: false });
    // The page keeps its socket in `app` (before the split, in a global `ws`).
    (typeof app !== "undefined" ? app.ws : ws).addEventListener("message", (m) => {
      const b = window.bench;
      if (b.first === undefined) b.first = performance.now();
      // The last fragment is the frame before `done`.
      if (m.data.includes('"type":"done"')) b.last = b.previous; else b.previous = performance.now();
    });
  });
  await page.fill("#input", "write a long answer");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => {
    const box = document.querySelector(".msg.assistant");
    if (!window.bench.last || !box || box.dataset.state !== "done" || !box.textContent.includes("THE-END")) return false;
    window.bench.rendered ??= performance.now();
    return true;
  }, null, { polling: "raf", timeout: 120000 });
  // Let a long task that ended the render be reported.
  await page.waitForTimeout(200);
  const b = await page.evaluate(() => window.bench);
  const blocks = await page.locator(".msg.assistant .md *").count();
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("HeapProfiler.collectGarbage");
  const heap = await page.evaluate(() => performance.memory.usedJSHeapSize);
  const elements = await page.evaluate(() => document.getElementsByTagName("*").length);
  if (process.env.PROFILE) console.error(JSON.stringify({ flush: b.flushText, frame: b.onFrame, finish: b.finish, long: b.entries, first: b.first, last: b.last }));
  results.push({ afterLast: b.rendered - b.last, total: b.rendered - b.first, longest: b.longest, tasks: b.tasks, blocks, heap, elements, sent: b.last - b.first });
  await page.close();
}
const version = browser.version();
await browser.close();
server.close();
const ms = (x) => x.toFixed(0) + " ms";
const worst = (k) => Math.max(...results.map((r) => r[k]));
const mb = (x) => (x / 1048576).toFixed(1) + " MB";
const how = rate ? `paced at ${rate} KB/s` : "as fast as the socket carries them";
const body = [
  "| run | sent in | shown after the last fragment | longest main-thread task | tasks over 50 ms | elements | JS heap |",
  "|---|---|---|---|---|---|---|",
  ...results.map((r, i) => `| ${i + 1} | ${ms(r.sent)} | ${ms(r.afterLast)} | ${ms(r.longest)} | ${r.tasks} | ${r.elements.toLocaleString("en-US")} | ${mb(r.heap)} |`),
  "",
  `${text.length.toLocaleString("en-US")} bytes of Markdown in ${Math.ceil(text.length / 16).toLocaleString("en-US")} \`text\` frames of 16 characters (${how}), ${runs} runs: `
    + `worst ${ms(worst("afterLast"))} after the last fragment, longest task ${ms(worst("longest"))}.`,
  "The page is served by a minimal WebSocket server in the script (no picogent, no model),",
  "then `done`; the page measures when the whole answer is shown and every main-thread task",
  "over 50 ms (PerformanceObserver `longtask`); elements and heap (after a garbage collection)",
  `at the end. Goal (issue 40): shown within 2 s of the last fragment, no task over 100 ms. Chromium ${version} headless;`,
  `load average ${loadBefore.toFixed(1)} before the first run, ${loadavg()[0].toFixed(1)} after the last.` + (process.env.CLIENT_DIR ? ` Page: \`${process.env.CLIENT_DIR}\`.` : ""),
].join("\n");
const env = process.env.CLIENT_DIR ? `CLIENT_DIR=${process.env.CLIENT_DIR} ` : "";
emit({
  title: `Browser: streaming a ${kb >= 1024 ? kb / 1024 + " MB" : kb + " KB"} answer${code ? " (one code block)" : ""}${rate ? ", paced at " + rate + " KB/s," : ""} in client.html`,
  script: "bench/stream.mjs",
  command: `${env}node bench/stream.mjs ${runs} --kb ${kb}${rate ? " --rate " + rate : ""}${code ? " --code" : ""}${record ? " --record" : ""}`,
  body,
  record,
});
