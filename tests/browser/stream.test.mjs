// client/stream.js without a browser: an answer streamed in random pieces, with frames
// between them at random, ends up as the same blocks as the whole answer rendered at
// once (client/markdown.js), whatever the pieces: a line still being written, long code
// blocks growing line by line (blank lines kept), long tables parsed as they grow.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import vm from "node:vm";
import { parseHTML } from "linkedom";

const client = join(dirname(fileURLToPath(import.meta.url)), "../../client");

/** The page's state, Markdown and streaming scripts in a DOM of their own, with
 * animation frames run when the test says. */
function page() {
  const { document, window } = parseHTML('<!doctype html><html><body><main id="log"><div id="thread"></div></main></body></html>');
  const frames = [];
  const ctx = vm.createContext({
    window, document, console, URL, performance, setTimeout, clearTimeout,
    requestAnimationFrame: (f) => frames.push(f),
    nearBottom: () => false, toBottom: () => {}, updateJump: () => {},
  });
  for (const f of ["state.js", "markdown.js", "stream.js"]) vm.runInContext(readFileSync(join(client, f), "utf8"), ctx, { filename: f });
  const frame = () => { const run = frames.splice(0); for (const f of run) f(); return run.length; };
  return { ctx, document, frame };
}

/** The blocks a rendered answer shows, chunks and code runs flattened: [tag, text]. */
function shown(root) {
  const out = [];
  for (const n of root.children) {
    if (n.classList.contains("mdc")) out.push(...shown(n));
    // A code block: its code (a block that grew line by line ends each line with "\n").
    else if (n.classList.contains("codeblock")) out.push(["CODE", n.querySelector("code").textContent.replace(/\n+$/, ""), n.querySelector(".lang")?.textContent]);
    else out.push([n.tagName, n.textContent]);
  }
  return out;
}

/** A small seeded random source (the same pieces every run). */
function rng(seed) { return () => ((seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648); }

function stream(src, seed) {
  const { ctx, document, frame } = page();
  const seg = vm.runInContext("(p) => new TextSeg(p, null)", ctx)(document.getElementById("thread"));
  const r = rng(seed);
  for (let i = 0; i < src.length;) {
    const n = 1 + Math.floor(r() * (r() < 0.1 ? 30000 : 300));
    seg.add(src.slice(i, i + n)); i += n;
    if (r() < 0.3) frame();
  }
  seg.end();
  for (let k = 0; k < 10000 && frame(); k++);
  assert.equal(seg.behind(), false, "everything shown");
  const whole = vm.runInContext("(s) => PicoMarkdown.markdown(s)", ctx)(src);
  return { got: shown(seg.root), want: shown(whole) };
}

const code = (n, blank) => "```js\n" + Array.from({ length: n }, (_, i) => (blank && i % 7 === 3 ? "" : `const line${i} = ${i}; // item ${i}`)).join("\n") + "\n```\n";
const table = (n) => "| key | value |\n|---|---|\n" + Array.from({ length: n }, (_, i) => `| k${i} | ${"v".repeat(i % 40)} |`).join("\n") + "\n";
const answers = {
  "prose, lists, headings, a line still being written": "Intro para\n#hashtag continues it\n***bold*** too\n\n# Title\n\n- a\n- b\n  - c\n\n1. one\n2. two\n\n> quote\n> more\n\n---\n\nend para with `code`\n",
  "a long code block with blank lines, then prose": "Here:\n\n" + code(900, true) + "\nAfter the code.\n\n" + code(20, false) + "Tail.",
  "an answer that starts with blank lines and a long fence": "\n\n" + code(1200, false) + "\ndone\n",
  "a long table among paragraphs": "Before.\n\n" + table(3000) + "\nAfter.\n\n" + "word ".repeat(5000) + "\n",
  "an unclosed fence at the end": "Start\n\n" + code(600, true).replace(/```\n$/, ""),
  "CRLF line ends": "a\r\nb\r\n\r\n# h\r\n\r\n```\r\nx\r\n```\r\n",
};

for (const [name, src] of Object.entries(answers)) {
  test("streamed in random pieces, the same as rendered whole: " + name, () => {
    for (const seed of [1, 2, 3, 42]) {
      const { got, want } = stream(src, seed);
      assert.deepEqual(got, want, "seed " + seed);
    }
  });
}
