// Streaming cost of client.html in real Chromium: a 35 KB Markdown answer arrives as
// 16-character `text` frames over a real WebSocket, as fast as the socket carries them,
// then `done`. Measured in the page: how long after its last fragment arrived the whole
// answer is rendered, and the longest main-thread task (PerformanceObserver
// "longtask") during the stream.
//
//   node bench/stream.mjs [runs]            (default: 5 runs)
//   node bench/stream.mjs [runs] --record   also records the table in bench/RESULTS.md
//                                           (bench/report.mjs)
//
// It prints the Markdown section on stdout. It needs tests/browser's playwright-core and
// Debian's chromium, as the browser test does; CLIENT_HTML=path measures another version
// of the page, PROFILE=1 also prints (on stderr) the longest call of the page's frame
// handler, text flush and finish per run.
//
// The server here is a minimal WebSocket server (no picogent, no model): it serves the
// page and speaks only the frames the page needs, so the figure is the page's own.
import { createServer } from "node:http";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { answer } from "./answer.mjs";
import { cli, emit } from "./report.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, "tests/browser/package.json"));
const { chromium } = require("playwright-core");
const html = readFileSync(process.env.CLIENT_HTML || join(root, "client.html"));
const { record, args } = cli();
const runs = Number(args[0] || 5);

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

const text = answer();
const server = createServer((req, res) => { res.writeHead(200, { "content-type": "text/html" }); res.end(html); });
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
      socket.write(Buffer.concat(chunks));
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
    ws.addEventListener("message", (m) => {
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
  const blocks = await page.locator(".msg.assistant .md > *").count();
  if (process.env.PROFILE) console.error(JSON.stringify({ flush: b.flushText, frame: b.onFrame, finish: b.finish, long: b.entries, first: b.first, last: b.last }));
  results.push({ afterLast: b.rendered - b.last, total: b.rendered - b.first, longest: b.longest, tasks: b.tasks, blocks });
  await page.close();
}
const version = browser.version();
await browser.close();
server.close();
const ms = (x) => x.toFixed(0) + " ms";
const worst = (k) => Math.max(...results.map((r) => r[k]));
const body = [
  "| run | rendered after the last fragment | after the first | longest main-thread task | tasks over 50 ms | blocks |",
  "|---|---|---|---|---|---|",
  ...results.map((r, i) => `| ${i + 1} | ${ms(r.afterLast)} | ${ms(r.total)} | ${ms(r.longest)} | ${r.tasks} | ${r.blocks} |`),
  "",
  `${text.length.toLocaleString("en-US")} bytes of Markdown in ${Math.ceil(text.length / 16).toLocaleString("en-US")} \`text\` frames of 16 characters, ${runs} runs: `
    + `worst ${ms(worst("afterLast"))} after the last fragment, longest task ${ms(worst("longest"))}.`,
  "The page is served by a minimal WebSocket server in the script (no picogent, no model),",
  "which sends the frames as fast as the socket carries them, then `done`; the page measures",
  "when the whole answer is rendered and every main-thread task over 50 ms",
  "(PerformanceObserver `longtask`). Goal (issue 15): done within 1 s of the last fragment,",
  `no task over 100 ms. Chromium ${version} headless; load average ${loadBefore.toFixed(1)} before the first run,`,
  `${loadavg()[0].toFixed(1)} after the last.` + (process.env.CLIENT_HTML ? ` Page: \`${process.env.CLIENT_HTML}\`.` : ""),
].join("\n");
const env = process.env.CLIENT_HTML ? `CLIENT_HTML=${process.env.CLIENT_HTML} ` : "";
emit({
  title: "Browser: streaming a long answer in client.html",
  script: "bench/stream.mjs",
  command: `${env}node bench/stream.mjs ${runs}${record ? " --record" : ""}`,
  body,
  record,
});
