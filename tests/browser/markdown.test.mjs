// client/markdown.js without a browser: the page's Markdown renderer against linkedom's
// DOM, under `node --test`. What it builds is read back as HTML.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { parseHTML } from "linkedom";

const require = createRequire(import.meta.url);
const md = require("../../client/markdown.js");
const { document } = parseHTML("<!doctype html><html><body></body></html>");
md.use(document);
/** A node as HTML with its attributes sorted (and a checkbox's state), so what is
 * compared is what was built, not the DOM's attribute order. */
function show(n) {
  if (n.nodeType === 3) return n.textContent.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const tag = n.tagName.toLowerCase();
  const attrs = [...n.attributes].map((a) => a.name + (a.value === "" ? "" : '="' + a.value + '"'));
  if (tag === "input" && n.checked && !attrs.includes("checked")) attrs.push("checked");
  attrs.sort();
  const open = "<" + tag + attrs.map((a) => " " + a).join("") + ">";
  if (["hr", "br", "input"].includes(tag)) return open;
  return open + [...n.childNodes].map(show).join("") + "</" + tag + ">";
}
const html = (src) => [...md.markdown(src).childNodes].map(show).join("");

test("blocks: headings, paragraphs, lists, quotes, rules, fences, tables", () => {
  assert.equal(html("# Title\n\nsome *text* and **bold**"), "<h1>Title</h1><p>some <em>text</em> and <strong>bold</strong></p>");
  assert.equal(html("- a\n- b\n\n1. one\n2. two"), "<ul><li>a</li><li>b</li></ul><ol><li>one</li><li>two</li></ol>");
  assert.equal(html("> quoted\n\n---"), "<blockquote><p>quoted</p></blockquote><hr>");
  assert.equal(html("Setext\n==="), "<h1>Setext</h1>");
  assert.equal(html("| a | b |\n|:--|--:|\n| 1 | 2 |"),
    '<table><thead><tr><th style="text-align:left">a</th><th style="text-align:right">b</th></tr></thead>' +
    '<tbody><tr><td style="text-align:left">1</td><td style="text-align:right">2</td></tr></tbody></table>');
  assert.equal(html("- [x] done\n- [ ] not"), '<ul><li class="task"><input aria-label="done" checked disabled type="checkbox">done</li>' +
    '<li class="task"><input aria-label="not done" disabled type="checkbox">not</li></ul>');
});

test("code: fences keep their text, coloured by language; inline code and escapes", () => {
  const out = html("```rust\nfn main() { let x = \"<b>\"; }\n```");
  assert.match(out, /^<div class="codeblock"><pre><code data-lang="rust"><span class="hl-k">fn<\/span> main\(\)/);
  assert.match(out, /<span class="hl-s">"&lt;b&gt;"<\/span>/);
  assert.equal(html("`a <b> c` and \\*not em\\*"), "<p><code>a &lt;b&gt; c</code> and *not em*</p>");
  assert.equal(html("~~~\n# not a heading\n~~~"), '<div class="codeblock"><pre><code># not a heading</code></pre></div>');
});

test("model text is never HTML, and links only go where they may", () => {
  assert.equal(html("<img src=x onerror=alert(1)>"), "<p>&lt;img src=x onerror=alert(1)&gt;</p>");
  assert.equal(html("[x](javascript:alert(1))"), "<p>x</p>");
  // A scheme behind a control character, which a browser's URL parser drops, is still refused.
  assert.equal(html("[x](\u0001javascript:alert(1))"), "<p>x</p>");
  assert.equal(html("[x](data:text/html,hi)"), "<p>x</p>");
  assert.equal(html("[rel](docs/a.md)"), '<p><a href="docs/a.md" rel="noopener noreferrer" target="_blank">rel</a></p>');
  assert.equal(html("[x](https://example.com/a_(b))"), '<p><a href="https://example.com/a_(b)" rel="noopener noreferrer" target="_blank">x</a></p>');
  assert.equal(html("see www.example.com."), '<p>see <a href="https://www.example.com" rel="noopener noreferrer" target="_blank">www.example.com</a>.</p>');
  // An image is a link to it: the page loads nothing the model names.
  assert.equal(html("![logo](https://x.test/l.png)"), '<p><a href="https://x.test/l.png" rel="noopener noreferrer" target="_blank">🖼 logo</a></p>');
  assert.equal(html("&amp; &copy; &#x26; &bogus;"), "<p>&amp; © &amp; &amp;bogus;</p>");
});

test("emphasis follows CommonMark's flanking rules", () => {
  assert.equal(html("snake_case_name and *a*b"), "<p>snake_case_name and <em>a</em>b</p>");
  assert.equal(html("***both*** ~~gone~~"), "<p><em><strong>both</strong></em> <del>gone</del></p>");
  assert.equal(html("2 * 3 * 4"), "<p>2 * 3 * 4</p>");
});

test("blocks() says where each top-level block starts, for streaming", () => {
  const starts = md.blocks("# h\n\npara\nmore\n\n- a\n- b".split("\n")).map((b) => [b.start, b.node.tagName]);
  assert.deepEqual(starts, [[0, "H1"], [2, "P"], [5, "UL"]]);
});
