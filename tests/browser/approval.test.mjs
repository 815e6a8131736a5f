// Approvals in the browser chat: with `approval` asking, a call waits under its step
// with the four answers, reachable by keyboard; a second tab sees the same prompt and
// sees it answered; a rejection never runs the call; "always" holds for the session.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { startPicogent, launchChromium, stopAll } from "./harness.mjs";

let browser;
before(async () => { browser = await launchChromium(); });
after(async () => { if (browser) await browser.close(); stopAll(); });

async function open(url) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  page.on("dialog", () => assert.fail("the page must not use window dialogs"));
  await page.goto(url);
  await page.waitForSelector('#status[data-state="open"]');
  return page;
}

test("a command waits for a yes under its step: four answers by keyboard, two tabs in step, a no never runs, always holds", async () => {
  const { url, tmp } = await startPicogent([
    { text: "First this.", tool: "bash", args: { command: "echo one > one.txt" } },
    { tool: "bash", args: { command: "echo two > two.txt" } },
    { tool: "write", args: { path: "w.txt", content: "x" } },
    { tool: "read", args: { path: "notes.txt" } },
    { text: "Done." },
  ], { PICOGENT_APPROVAL: "execute=ask,edit=ask" });
  const work = join(tmp, "work");
  const page = await open(url);
  await page.fill("#input", "Work carefully");
  await page.press("#input", "Enter");
  const prompt = page.locator(".stepline .approval");
  await prompt.waitFor();
  assert.match(await prompt.textContent(), /Bash: echo one > one\.txt/);
  assert.equal(await prompt.locator("pre.cmd").textContent(), "echo one > one.txt");
  assert.deepEqual(await prompt.locator("button").allTextContents(), ["Allow", "Always allow bash", "Reject", "Always reject bash"]);
  assert.equal(existsSync(join(work, "one.txt")), false, "nothing runs before the answer");
  // A second tab on the same session shows the same question.
  const session = (await page.textContent("#session-id")).replace("session ", "");
  const other = await open(url + "#session=" + session);
  await other.locator(".stepline .approval").waitFor();
  // By keyboard: Tab from the message box reaches the answers; Enter on "Always allow".
  await page.focus("#input");
  let reached = false;
  for (let i = 0; i < 40 && !reached; i++) {
    await page.keyboard.press("Tab");
    reached = await page.evaluate(() => document.activeElement?.dataset.answer === "allow_always");
  }
  assert.ok(reached, "the answers are reachable with Tab");
  await page.keyboard.press("Enter");
  // Answered: the prompt goes in both tabs; the second bash runs without asking.
  await page.waitForFunction(() => document.querySelectorAll(".step").length >= 3);
  await other.waitForFunction(() => !document.querySelector(".stepline .approval") || document.querySelectorAll(".stepline .approval").length === 1 && document.querySelector(".stepline .approval").textContent.includes("Write"));
  // The write asks; rejected from the other tab.
  const write = other.locator(".stepline .approval", { hasText: "Write" });
  await write.waitFor();
  await write.locator('button[data-answer="reject_once"]').click();
  await page.waitForSelector('.msg.assistant[data-state="done"]', { timeout: 60000 });
  assert.ok(existsSync(join(work, "one.txt")) && existsSync(join(work, "two.txt")));
  assert.equal(existsSync(join(work, "w.txt")), false, "a rejected write never runs");
  assert.equal(await page.locator(".stepline .approval").count(), 0);
  assert.equal(await page.locator('.step[data-rejected="reject_once"]').count(), 1);
  await other.close();
  await page.close();
});
