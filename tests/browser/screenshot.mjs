// Makes the README's picture of the page: `node tests/browser/screenshot.mjs [out.png]`
// (default docs/chat.png) runs a short session against the scripted model (a file
// read, an edit with its diff, a command, a Markdown answer) beside an earlier one in
// the sessions list, and photographs it at 1280×800. Needs the built debug binaries.
import { join } from "node:path";
import { root, startPicogent, launchChromium, stopAll } from "./harness.mjs";

const out = process.argv[2] || join(root, "docs/chat.png");
const { url } = await startPicogent([
  { text: "The notes greet whoever reads them." },
  { tool: "read", args: { path: "notes.txt" } },
  { tool: "edit", args: { path: "notes.txt", oldText: "hello from the notes", newText: "hello from the notes, now with a date: 2026-12-01" } },
  { tool: "bash", args: { command: "wc -l notes.txt && tail -n 1 notes.txt" } },
  { text: "Done. `notes.txt` now carries the date:\n\n| file | change |\n|---|---|\n| notes.txt | greeting dated 2026-12-01 |\n\nThe command confirms one line:\n\n```sh\n$ tail -n 1 notes.txt\nhello from the notes, now with a date: 2026-12-01\n```" },
]);
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  await page.fill("#input", "What do the notes say?");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.click("#new-session");
  await page.fill("#input", "Date the greeting in notes.txt and check it");
  await page.press("#input", "Enter");
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  await page.click('.step[data-tool="edit"] summary');
  await page.click('.step[data-tool="edit"] button.label-correct');
  await page.evaluate(() => document.activeElement.blur());
  await page.screenshot({ path: out });
  console.log("wrote " + out);
} finally {
  await browser.close();
  stopAll();
}
