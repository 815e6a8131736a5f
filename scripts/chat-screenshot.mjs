// Makes docs/chat.png: client.html in headless Chromium at 1280×800 after a scripted
// run (a read, an edit whose step is open to show its diff, the checkpoint after it and
// a person's verdict with a note, a test run, a Markdown answer), with an earlier
// session in the sessions list; against the debug builds of picogent and the scripted
// model.
//
//   cargo build --bin picogent --example scripted_llm && node scripts/chat-screenshot.mjs [out.png]
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { root, startPicogent, launchChromium, stopAll } from "../tests/browser/harness.mjs";

const out = resolve(process.argv[2] || join(root, "docs/chat.png"));
const { url, tmp } = await startPicogent([
  { text: "It greets whoever reads it: `hello from the notes`." },
  { tool: "read", args: { path: "greet.py" } },
  { tool: "edit", args: { path: "greet.py", edits: [{ oldText: "    return \"Hello \" + name\n", newText: "    if not name:\n        name = \"world\"\n    return f\"Hello, {name}!\"\n" }] } },
  { tool: "bash", args: { command: "python3 -c 'from greet import greet; print(greet(\"\"), greet(\"Ada\"))'" } },
  { text: "Fixed `greet` in `greet.py`:\n\n- an empty name now greets the **world**\n- the greeting gets its comma and `!`\n\n| call | result |\n|---|---|\n| `greet(\"\")` | Hello, world! |\n| `greet(\"Ada\")` | Hello, Ada! |" },
]);
writeFileSync(join(tmp, "work/greet.py"), "def greet(name):\n    return \"Hello \" + name\n");
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  for (const [prompt, first] of [["What do the notes say?", true], ["greet('') returns 'Hello ' — fix it and check", false]]) {
    if (!first) await page.click("#new-session");
    await page.fill("#input", prompt);
    await page.press("#input", "Enter");
    await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 20000 });
  }
  await page.click('.step[data-tool="edit"] summary');
  await page.click('.step[data-tool="edit"] button.label-note');
  await page.check('#modal input[type="radio"][value="correct"]');
  await page.fill('#modal textarea[name="note"]', "handles the empty name; the f-string is clearer");
  await page.click("#modal button.ok");
  await page.waitForSelector('.step[data-tool="edit"] .saved:text-is("saved")');
  await page.evaluate(() => document.activeElement.blur());
  await page.screenshot({ path: out });
  console.log("wrote " + out);
} finally {
  await browser.close();
  stopAll();
}
