// Makes docs/chat.png: client.html in headless Chromium after a scripted run (read, an
// edit whose step is expanded to show its coloured diff, a test run, a Markdown answer),
// against the debug builds of picogent and the scripted model.
//
//   cargo build --bin picogent --example scripted_llm && node scripts/chat-screenshot.mjs [out.png]
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { chromium } = createRequire(join(root, "tests/browser/package.json"))("playwright-core");
const target = process.env.CARGO_TARGET_DIR || join(root, "target");
const out = resolve(process.argv[2] || join(root, "docs/chat.png"));

const greet = "def greet(name):\n    return \"Hello \" + name\n";
const script = [
  { tool: "read", args: { path: "greet.py" } },
  { tool: "edit", args: { path: "greet.py", edits: [{ oldText: "    return \"Hello \" + name\n", newText: "    if not name:\n        name = \"world\"\n    return f\"Hello, {name}!\"\n" }] } },
  { tool: "bash", args: { command: "python3 -c 'from greet import greet; print(greet(\"\"), greet(\"Ada\"))'" } },
  { text: "Fixed `greet` in `greet.py`:\n\n- an empty name now greets the **world**\n- the greeting gets its comma and `!`\n\n| call | result |\n|---|---|\n| `greet(\"\")` | Hello, world! |\n| `greet(\"Ada\")` | Hello, Ada! |" },
];

const children = [];
const tmp = mkdtempSync(join(tmpdir(), "picogent-shot-"));
const work = join(tmp, "work");
mkdirSync(work);
writeFileSync(join(work, "greet.py"), greet);
writeFileSync(join(tmp, "script.json"), JSON.stringify(script));
try {
  const llm = spawn(join(target, "debug/examples/scripted_llm"), [join(tmp, "script.json")], { stdio: ["ignore", "pipe", "inherit"] });
  children.push(llm);
  const addr = (await new Promise((ok) => createInterface({ input: llm.stdout }).once("line", ok))).split(" ").pop();
  const port = await new Promise((ok) => { const s = createServer(); s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => ok(p)); }); });
  const pg = spawn(join(target, "debug/picogent"), [], {
    cwd: work, stdio: ["ignore", "ignore", "inherit"],
    env: { PATH: process.env.PATH, HOME: tmp, RUST_LOG: "warn", PICOGENT_PROVIDER: "anthropic", PICOGENT_BASE_URL: "http://" + addr,
      PICOGENT_API_KEY: "test-key", PICOGENT_PORT: String(port) },
  });
  children.push(pg);
  const url = `http://127.0.0.1:${port}/`;
  for (let i = 0; ; i++) {
    try { if ((await fetch(url + "healthz")).ok) break; } catch {}
    if (i > 300) throw new Error("picogent did not start");
    await new Promise((r) => setTimeout(r, 50));
  }
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium", args: ["--headless", "--no-sandbox", "--disable-gpu"] });
  const page = await browser.newPage({ viewport: { width: 1000, height: 900 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "greet() should handle an empty name and add punctuation");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 30000 });
  await page.click('.step[data-tool="edit"] summary');
  await page.click('.step[data-tool="edit"] button.label-correct');
  await page.evaluate(() => { document.querySelector("#log").scrollTop = 0; });
  mkdirSync(dirname(out), { recursive: true });
  await page.screenshot({ path: out });
  await browser.close();
  console.log("wrote " + out);
} finally {
  for (const c of children) c.kill("SIGKILL");
}
