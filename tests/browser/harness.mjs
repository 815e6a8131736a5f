// What the browser test and the page benchmarks share: picogent's chat mode against the
// scripted model, each in a fresh folder, and headless Debian Chromium.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";
import { chromium } from "playwright-core";

export const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const target = process.env.CARGO_TARGET_DIR || join(root, "target");
/** The cargo profile whose binaries run (`debug` unless PICOGENT_PROFILE says). */
const profile = process.env.PICOGENT_PROFILE || "debug";
const children = [];

function freePort() {
  return new Promise((ok) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => ok(port)); });
  });
}

function firstLine(child) {
  return new Promise((ok, fail) => {
    const rl = createInterface({ input: child.stdout });
    rl.once("line", ok);
    child.once("exit", (code) => fail(new Error("exited early: " + code)));
  });
}

async function waitHttp(url, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try { if ((await fetch(url)).ok) return; } catch {}
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error("no answer from " + url);
}

/** Starts the scripted model with `script` and picogent's chat mode in a fresh folder
 * (`build`: another cargo target folder's binaries, to compare two builds; `files`:
 * more files in the working folder, by name). */
export async function startPicogent(script, extraEnv = {}, build = target, files = {}) {
  const tmp = mkdtempSync(join(tmpdir(), "picogent-browser-"));
  const work = join(tmp, "work");
  mkdirSync(work);
  writeFileSync(join(work, "notes.txt"), "hello from the notes\n");
  for (const [name, text] of Object.entries(files)) writeFileSync(join(work, name), text);
  writeFileSync(join(tmp, "script.json"), JSON.stringify(script));
  const llm = spawn(join(build, profile, "examples/scripted_llm"), [join(tmp, "script.json")], { stdio: ["ignore", "pipe", "inherit"] });
  children.push(llm);
  const addr = (await firstLine(llm)).split(" ").pop();
  const port = await freePort();
  const pg = spawn(join(build, profile, "picogent"), [], {
    cwd: work,
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      PATH: process.env.PATH, HOME: tmp, RUST_LOG: "warn",
      PICOGENT_PROVIDER: "anthropic", PICOGENT_BASE_URL: "http://" + addr, PICOGENT_API_KEY: "test-key",
      PICOGENT_PORT: String(port), ...extraEnv,
    },
  });
  children.push(pg);
  await waitHttp(`http://127.0.0.1:${port}/healthz`, 15000);
  return { url: `http://127.0.0.1:${port}/`, tmp };
}

/** Headless Debian Chromium (CHROMIUM names another). */
export function launchChromium(extraArgs = []) {
  return chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync", ...extraArgs],
  });
}

/** Ends every process `startPicogent` started. */
export function stopAll() {
  for (const c of children.splice(0)) c.kill("SIGKILL");
}
