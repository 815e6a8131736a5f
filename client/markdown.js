// @ts-check
/**
 * Markdown for model text: CommonMark blocks, GFM tables, task lists, strikethrough and
 * autolinks, and a small syntax colourer for code blocks. Everything becomes DOM nodes
 * built here; model text is only ever a text node, never HTML, and a link only ever
 * points at http(s), mailto or a relative address.
 *
 * A classic script (the page also opens from disk, where modules do not load): it
 * defines `PicoMarkdown`, and under Node (`node --test`, with a DOM such as linkedom's)
 * exports it. `PicoMarkdown.use(document)` says which document builds the nodes.
 */
var PicoMarkdown = (function () {
"use strict";
/** @type {Document} */
let doc = typeof document === "undefined" ? /** @type {any} */ (null) : document;
/**
 * @param {string} tag
 * @param {string} [cls]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
function el(tag, cls, text) {
  const e = doc.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
const PUNCT = /[!-/:-@[-`{-~\p{P}\p{S}]/u;
const WORD = /[\p{L}\p{N}]/u;
/** The address a link may point at: http(s), mailto or one relative to the page;
 * anything else (javascript:, data:, and schemes hidden behind control characters or
 * tabs, which the browser's URL parser drops) stays text. @param {string} url */
function safeHref(url) {
  url = url.trim();
  let parsed;
  try { parsed = new URL(url, "http://relative.invalid/"); } catch { return null; }
  if (!["http:", "https:", "mailto:"].includes(parsed.protocol)) return null;
  // Relative: what was written (the URL parser kept the base's scheme).
  if (parsed.host === "relative.invalid" && !/^[a-z][a-z0-9+.-]*:/i.test(url)) return url;
  return /^(https?:|mailto:)/i.test(url) ? url : null;
}
function link(parent, href, build) {
  const safe = safeHref(href);
  if (!safe) { build(parent); return; }
  const a = /** @type {HTMLAnchorElement} */ (el("a")); a.href = safe; a.target = "_blank"; a.rel = "noopener noreferrer"; build(a); parent.appendChild(a);
}
/** Where a backtick run of exactly `n` starts at or after `from`, or -1. */
function codeEnd(s, from, n) {
  for (let j = from; j < s.length; j++) {
    if (s[j] !== "`") continue;
    let k = j; while (s[k] === "`") k++;
    if (k - j === n) return j;
    j = k - 1;
  }
  return -1;
}
/** The index of the `]` that closes the `[` at `i`, skipping code spans and escapes. */
function closeBracket(s, i) {
  let depth = 0;
  for (let j = i; j < s.length; j++) {
    const c = s[j];
    if (c === "\\") { j++; continue; }
    if (c === "`") { const n = at(/`+/y, s, j)[0].length; const k = codeEnd(s, j + n, n); j = (k > 0 ? k : j) + n - 1; continue; }
    if (c === "[") depth++;
    else if (c === "]" && --depth === 0) return j;
  }
  return -1;
}
/** `(url "title")` at `i`: [url, end] with balanced parentheses in the url. */
function linkDest(s, i) {
  if (s[i] !== "(") return null;
  let j = i + 1; while (s[j] === " ") j++;
  let url = "";
  if (s[j] === "<") { const k = s.indexOf(">", j); if (k < 0) return null; url = s.slice(j + 1, k); j = k + 1; }
  else {
    let depth = 0; const st = j;
    for (; j < s.length; j++) {
      const c = s[j];
      if (c === "\\") { j++; continue; }
      if (c === "(") depth++;
      else if (c === ")") { if (depth === 0) break; depth--; }
      else if (/\s/.test(c)) break;
    }
    url = s.slice(st, j).replace(/\\(.)/g, "$1");
  }
  while (s[j] === " ") j++;
  if (s[j] === '"' || s[j] === "'") { const k = s.indexOf(s[j], j + 1); if (k < 0) return null; j = k + 1; while (s[j] === " ") j++; }
  return s[j] === ")" ? [url, j + 1] : null;
}
/** Where the closing delimiter run for `d` (length n) after `from` is, or -1. */
function findCloser(s, from, d, n) {
  for (let j = from; j < s.length; j++) {
    const c = s[j];
    if (c === "\\") { j++; continue; }
    if (c === "`") { const n = at(/`+/y, s, j)[0].length; const k = codeEnd(s, j + n, n); j = (k > 0 ? k : j) + n - 1; continue; }
    if (c === "[" ) { const k = closeBracket(s, j); if (k > 0 && s[k + 1] === "(") { const dest = linkDest(s, k + 1); if (dest) { j = dest[1] - 1; continue; } } }
    if (c !== d) continue;
    let k = j; while (s[k] === d) k++;
    const run = k - j, prev = s[j - 1], next = s[k];
    const rightFlank = prev !== undefined && !/\s/.test(prev) && (!PUNCT.test(prev) || next === undefined || /\s/.test(next) || PUNCT.test(next));
    const intraOk = d !== "_" || next === undefined || !WORD.test(next);
    if (rightFlank && intraOk && j > from) { if (run === n) return j; if (d !== "~" && run === 3 && n < 3) return k - n; }
    j = k - 1;
  }
  return -1;
}
/** The character an entity reference (`amp`, `#38`, `#x26`) stands for, or null. As a
 * text node's content it is only ever text. */
const ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'", nbsp: "\u00a0", copy: "©", reg: "®", trade: "™",
  hellip: "…", mdash: "—", ndash: "–", lsquo: "‘", rsquo: "’", ldquo: "“", rdquo: "”", laquo: "«", raquo: "»",
  times: "×", divide: "÷", deg: "°", plusmn: "±", middot: "·", bull: "•", larr: "←", rarr: "→", uarr: "↑", darr: "↓",
  harr: "↔", rArr: "⇒", lArr: "⇐", le: "≤", ge: "≥", ne: "≠", asymp: "≈", infin: "∞", sect: "§", para: "¶",
  euro: "€", pound: "£", yen: "¥", cent: "¢", check: "✓", ensp: "\u2002", emsp: "\u2003", thinsp: "\u2009",
  shy: "\u00ad", zwj: "\u200d", zwnj: "\u200c", micro: "µ", frac12: "½", frac14: "¼", frac34: "¾", sup2: "²", sup3: "³" };
function entity(name) {
  if (name[0] !== "#") return Object.prototype.hasOwnProperty.call(ENTITIES, name) ? ENTITIES[name] : null;
  const n = /^#[xX]/.test(name) ? parseInt(name.slice(2), 16) : parseInt(name.slice(1), 10);
  if (!(n > 0) || n > 0x10ffff || (n >= 0xd800 && n <= 0xdfff)) return "\ufffd";
  return String.fromCodePoint(n);
}
/** A sticky regex's match at `i`. */
function at(re, s, i) { re.lastIndex = i; return re.exec(s); }
function inline(parent, s) {
  let buf = "", i = 0;
  const flush = () => { if (buf) { parent.appendChild(doc.createTextNode(buf)); buf = ""; } };
  while (i < s.length) {
    const c = s[i];
    let m;
    if (c === "\\" && i + 1 < s.length) {
      if (s[i + 1] === "\n") { flush(); parent.appendChild(el("br")); i += 2; continue; }
      if (PUNCT.test(s[i + 1])) { buf += s[i + 1]; i += 2; continue; }
    }
    if (c === "`") {
      const run = at(/`+/y, s, i)[0]; const k = codeEnd(s, i + run.length, run.length);
      if (k > 0) {
        let code = s.slice(i + run.length, k).replace(/\n/g, " ");
        if (/^ .*[^ ].* $/.test(code)) code = code.slice(1, -1);
        flush(); parent.appendChild(el("code", "", code)); i = k + run.length; continue;
      }
      buf += run; i += run.length; continue;
    }
    if (c === "<" && (m = at(/<((?:https?|mailto):[^\s<>]*|[\w.+-]+@[\w-]+(?:\.[\w-]+)+)>/iy, s, i))) {
      flush(); const url = /^[\w.+-]+@/.test(m[1]) ? "mailto:" + m[1] : m[1];
      link(parent, url, (a) => a.appendChild(doc.createTextNode(m[1]))); i += m[0].length; continue;
    }
    if (c === "!" && s[i + 1] === "[" || c === "[") {
      const img = c === "!"; const open = img ? i + 1 : i; const close = closeBracket(s, open);
      const dest = close > 0 ? linkDest(s, close + 1) : null;
      if (dest) {
        flush(); const label = s.slice(open + 1, close);
        // Images are shown as links: the page loads nothing the model names.
        link(parent, dest[0], (a) => inline(a, img ? "🖼 " + (label || dest[0]) : label));
        i = dest[1]; continue;
      }
    }
    if ((c === "h" || c === "w") && !WORD.test(s[i - 1] || " ") && (m = at(/(?:https?:\/\/|www\.)[^\s<]+/y, s, i))) {
      let url = m[0];
      url = url.replace(/[?!.,:*_~'"]+$/, "");
      while (url.endsWith(")") && (url.match(/\(/g) || []).length < (url.match(/\)/g) || []).length) url = url.slice(0, -1);
      url = url.replace(/[?!.,:*_~'"]+$/, "");
      flush(); link(parent, url.startsWith("www.") ? "https://" + url : url, (a) => a.appendChild(doc.createTextNode(url)));
      i += url.length; continue;
    }
    if (c === "*" || c === "_" || c === "~") {
      const run = at(c === "*" ? /\*+/y : c === "_" ? /_+/y : /~+/y, s, i)[0];
      const prev = s[i - 1], next = s[i + run.length];
      const leftFlank = next !== undefined && !/\s/.test(next) && (!PUNCT.test(next) || prev === undefined || /\s/.test(prev) || PUNCT.test(prev));
      const intraOk = c !== "_" || prev === undefined || !WORD.test(prev);
      if (leftFlank && intraOk && (c !== "~" || run.length <= 2)) {
        const tries = c === "~" ? [run.length] : run.length >= 3 ? [3, 2, 1] : run.length === 2 ? [2, 1] : [1];
        let done = false;
        for (const n of tries) {
          const k = findCloser(s, i + n, c, n);
          if (k < 0) continue;
          const inner = s.slice(i + n, k);
          if (!inner) continue;
          flush();
          buf = c.repeat(run.length - n);
          flush();
          let node;
          if (c === "~") node = el("del");
          else if (n === 3) { node = el("em"); const st = el("strong"); node.appendChild(st); inline(st, inner); }
          else node = el(n === 2 ? "strong" : "em");
          if (n !== 3) inline(node, inner);
          parent.appendChild(node); i = k + n; done = true; break;
        }
        if (done) continue;
      }
      buf += run; i += run.length; continue;
    }
    if (c === "&" && (m = at(/&(#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});/y, s, i))) {
      const ch = entity(m[1]);
      if (ch !== null) { buf += ch; i += m[0].length; continue; }
    }
    if (c === "\n") {
      const hard = buf.endsWith("  ");
      while (buf.endsWith(" ")) buf = buf.slice(0, -1);
      if (hard) { flush(); parent.appendChild(el("br")); i++; continue; }
      buf += "\n"; i++; continue;
    }
    buf += c; i++;
  }
  flush();
}

// ---- syntax colouring (a small tokenizer; text nodes only) ----
const KW = {
  js: "await async break case catch class const continue default delete do else export extends false finally for from function if import in instanceof let new null of return static super switch this throw true try typeof undefined var void while yield",
  py: "and as assert async await break class continue def del elif else except False finally for from global if import in is lambda None nonlocal not or pass raise return self True try while with yield",
  rust: "as async await break const continue crate dyn else enum extern false fn for if impl in let loop match mod move mut pub ref return Self self static struct super trait true type unsafe use where while Some None Ok Err",
  go: "break case chan const continue default defer else fallthrough for func go goto if import interface map nil package range return select struct switch type var true false",
  sh: "if then else elif fi for while do done case esac in function return export local echo cd set unset exit",
  c: "auto break case char const continue default do double else enum extern float for goto if int long register return short signed sizeof static struct switch typedef union unsigned void volatile while class public private protected namespace template true false nullptr new delete",
  json: "true false null",
};
const ALIAS = { javascript: "js", ts: "js", typescript: "js", jsx: "js", tsx: "js", mjs: "js", python: "py", rs: "rust", bash: "sh", shell: "sh", zsh: "sh", console: "sh", cpp: "c", "c++": "c", h: "c", java: "c", cs: "c", csharp: "c", golang: "go", yaml: "sh", yml: "sh", toml: "sh" };
const HL = {};
function highlighter(lang) {
  const l = ALIAS[lang] || lang;
  if (!KW[l]) return null;
  if (HL[l]) return HL[l];
  const hash = ["py", "sh"].includes(l), slash = !["py", "sh", "json"].includes(l);
  const parts = [];
  if (slash) parts.push("\\/\\/[^\\n]*|\\/\\*[\\s\\S]*?\\*\\/");
  if (hash) parts.push("#[^\\n]*");
  const comment = parts.join("|");
  const re = new RegExp((comment ? "(" + comment + ")" : "()") +
    "|(\"(?:[^\"\\\\\\n]|\\\\.)*\"|'(?:[^'\\\\\\n]|\\\\.)*'|`(?:[^`\\\\]|\\\\.)*`)" +
    "|\\b(\\d[\\d_]*(?:\\.\\d+)?(?:e[+-]?\\d+)?|0x[\\da-f]+)\\b" +
    "|\\b(" + KW[l].split(" ").join("|") + ")\\b", "gi");
  return (HL[l] = re);
}
function highlight(code, lang, into) {
  const re = highlighter((lang || "").toLowerCase());
  if (!re) { into.textContent = code; return; }
  re.lastIndex = 0;
  let last = 0, m;
  while ((m = re.exec(code))) {
    if (m[0] === "") { re.lastIndex++; continue; }
    if (m.index > last) into.appendChild(doc.createTextNode(code.slice(last, m.index)));
    const cls = m[1] ? "hl-c" : m[2] ? "hl-s" : m[3] ? "hl-n" : "hl-k";
    into.appendChild(el("span", cls, m[0]));
    last = re.lastIndex;
  }
  if (last < code.length) into.appendChild(doc.createTextNode(code.slice(last)));
}
/**
 * A code block: its text coloured for `lang`. `text` says what its Copy copies (a
 * block still streaming grows after it is made).
 * @param {string} lang @param {string} code @param {() => string} [text]
 */
function codeBlock(lang, code, text) {
  const wrap = el("div", "codeblock");
  const pre = el("pre"); const c = el("code"); highlight(code, lang, c); pre.appendChild(c); wrap.appendChild(pre);
  if (lang) { wrap.appendChild(el("span", "lang", lang)); c.dataset.lang = lang; }
  if (api.onCodeBlock) api.onCodeBlock(wrap, text || (() => code), c);
  return wrap;
}

// ---- blocks ----
const RE = {
  fence: /^( {0,3})(`{3,}|~{3,})[ \t]*([^`\s]*)[^`]*$/,
  atx: /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/,
  hr: /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/,
  quote: /^ {0,3}> ?/,
  item: /^( {0,3})([-*+]|\d{1,9}[.)])(?:([ \t]+)(.*)|$)/,
  indented: /^(?: {4}|\t)/,
  setext: /^ {0,3}(=+|-+)[ \t]*$/,
  delim: /^ {0,3}\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$/,
};
const blank = (l) => !l || !l.trim();
function cells(row) {
  let r = row.trim(); if (r.startsWith("|")) r = r.slice(1); if (r.endsWith("|") && !r.endsWith("\\|")) r = r.slice(0, -1);
  const out = []; let cur = "", code = false;
  for (let i = 0; i < r.length; i++) {
    const c = r[i];
    if (c === "\\" && r[i + 1] === "|") { cur += "|"; i++; continue; }
    if (c === "`") code = !code;
    if (c === "|" && !code) { out.push(cur.trim()); cur = ""; continue; }
    cur += c;
  }
  out.push(cur.trim());
  return out;
}
/** Starts a block other than a paragraph (so it interrupts one). */
function interrupts(line) {
  if (RE.fence.test(line) || RE.atx.test(line) || RE.hr.test(line) || RE.quote.test(line)) return true;
  const m = line.match(RE.item);
  return !!(m && m[4] && m[4].trim() && (!/\d/.test(m[2][0]) || /^1[.)]$/.test(m[2])));
}
/** Parses lines into top-level blocks: [{start (line index), node}]. */
function blocks(lines) {
  const out = []; let i = 0;
  while (i < lines.length) {
    const line = lines[i], start = i;
    let m;
    if (blank(line)) { i++; continue; }
    if ((m = line.match(RE.fence))) {
      const indent = m[1].length, fence = m[2], body = []; i++;
      const closeRe = new RegExp("^ {0,3}" + fence[0] + "{" + fence.length + ",}[ \\t]*$");
      while (i < lines.length && !closeRe.test(lines[i])) { body.push(lines[i].replace(new RegExp("^ {0," + indent + "}"), "")); i++; }
      i++; out.push({ start, node: codeBlock(m[3], body.join("\n")) }); continue;
    }
    if ((m = line.match(RE.atx))) { const h = el("h" + m[1].length); inline(h, (m[2] || "").trim()); out.push({ start, node: h }); i++; continue; }
    if (RE.hr.test(line)) { out.push({ start, node: el("hr") }); i++; continue; }
    if (RE.quote.test(line)) {
      const q = [];
      while (i < lines.length && (RE.quote.test(lines[i]) || (!blank(lines[i]) && q.length && !blank(q[q.length - 1]) && !interrupts(lines[i])))) {
        q.push(lines[i].replace(RE.quote, "")); i++;
      }
      const bq = el("blockquote"); for (const b of blocks(q)) bq.appendChild(b.node); out.push({ start, node: bq }); continue;
    }
    if ((m = line.match(RE.item))) { const r = list(lines, i); out.push({ start, node: r.node }); i = r.end; continue; }
    if (RE.indented.test(line)) {
      const body = [];
      while (i < lines.length && (RE.indented.test(lines[i]) || blank(lines[i]))) { body.push(lines[i].replace(/^(?: {4}|\t)/, "")); i++; }
      while (body.length && blank(body[body.length - 1])) body.pop();
      out.push({ start, node: codeBlock("", body.join("\n")) }); continue;
    }
    if (line.includes("|") && i + 1 < lines.length && RE.delim.test(lines[i + 1]) && cells(line).length === cells(lines[i + 1]).length) {
      const head = cells(line), aligns = cells(lines[i + 1]).map((c) => c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : c.startsWith(":") ? "left" : "");
      const table = el("table"), thead = el("thead"), tr = el("tr");
      head.forEach((h, k) => { const th = el("th"); if (aligns[k]) th.style.textAlign = aligns[k]; inline(th, h); tr.appendChild(th); });
      thead.appendChild(tr); table.appendChild(thead);
      const tbody = el("tbody"); i += 2;
      while (i < lines.length && !blank(lines[i]) && !interrupts(lines[i])) {
        const row = el("tr"), cs = cells(lines[i]);
        head.forEach((_, k) => { const td = el("td"); if (aligns[k]) td.style.textAlign = aligns[k]; inline(td, cs[k] || ""); row.appendChild(td); });
        tbody.appendChild(row); i++;
      }
      if (tbody.children.length) table.appendChild(tbody);
      out.push({ start, node: table }); continue;
    }
    // a paragraph, perhaps a setext heading
    const para = [line]; i++;
    let heading = 0;
    while (i < lines.length && !blank(lines[i])) {
      const sm = lines[i].match(RE.setext);
      if (sm) { heading = sm[1][0] === "=" ? 1 : 2; i++; break; }
      if (interrupts(lines[i]) || (lines[i].includes("|") && i + 1 < lines.length && RE.delim.test(lines[i + 1]) && !RE.delim.test(lines[i]))) break;
      para.push(lines[i]); i++;
    }
    const p = el(heading ? "h" + heading : "p"); inline(p, para.map((l) => l.replace(/^[ \t]+/, "")).join("\n").replace(/[ \t]+$/, ""));
    out.push({ start, node: p });
  }
  return out;
}
function list(lines, i) {
  const first = lines[i].match(RE.item);
  const ordered = /\d/.test(first[2][0]), marker = first[2].slice(-1);
  const node = el(ordered ? "ol" : "ul");
  if (ordered && parseInt(first[2], 10) !== 1) /** @type {HTMLOListElement} */ (node).start = parseInt(first[2], 10);
  let loose = false; const items = [];
  while (i < lines.length) {
    const m = lines[i].match(RE.item);
    if (!m || /\d/.test(m[2][0]) !== ordered || m[2].slice(-1) !== marker) break;
    const spaces = m[3] ? m[3].length : 1;
    const indent = m[1].length + m[2].length + (spaces > 4 ? 1 : spaces);
    const body = [spaces > 4 ? " ".repeat(spaces - 1) + (m[4] || "") : (m[4] || "")]; i++;
    let sawBlank = false;
    while (i < lines.length) {
      const l = lines[i];
      if (blank(l)) { body.push(""); sawBlank = true; i++; continue; }
      const lead = l.match(/^ */)[0].length;
      if (lead >= indent) { if (sawBlank) loose = loose || body.slice(0, -1).some((b) => !blank(b)); body.push(l.slice(indent)); sawBlank = false; i++; continue; }
      if (!sawBlank && !interrupts(l) && !RE.item.test(l) && !blank(body[body.length - 1])) { body.push(l.trim()); i++; continue; } // lazy continuation
      break;
    }
    let trailing = 0; while (body.length && blank(body[body.length - 1])) { body.pop(); trailing++; }
    items.push(body);
    if (trailing && i < lines.length) {
      const n = lines[i].match(RE.item);
      if (n && /\d/.test(n[2][0]) === ordered && n[2].slice(-1) === marker) loose = true;
      else { break; }
    }
  }
  for (const body of items) {
    const li = el("li");
    const task = body[0].match(/^\[([ xX])\][ \t]+/);
    if (task) { li.className = "task"; const cb = /** @type {HTMLInputElement} */ (el("input")); cb.type = "checkbox"; cb.disabled = true; cb.checked = task[1] !== " "; cb.setAttribute("aria-label", cb.checked ? "done" : "not done"); li.appendChild(cb); body[0] = body[0].slice(task[0].length); }
    for (const b of blocks(body)) {
      if (!loose && b.node.tagName === "P") { while (b.node.firstChild) li.appendChild(b.node.firstChild); }
      else li.appendChild(b.node);
    }
    node.appendChild(li);
  }
  return { node, end: i };
}
function markdown(src) {
  const root = el("div", "md");
  for (const b of blocks(src.replace(/\r\n?/g, "\n").split("\n"))) root.appendChild(b.node);
  return root;
}

const api = {
  markdown, blocks, highlight, safeHref, codeBlock,
  /** A fenced code block's opening line: [_, indent, fence, lang]. */
  fence: RE.fence,
  /** Builds nodes in `d` from now on. @param {Document} d */
  use(d) { doc = d; },
  /** Called with each code block made (the page adds its Copy button).
   * @type {((wrap: HTMLElement, text: () => string, codeEl: HTMLElement) => void) | null} */
  onCodeBlock: null,
};
return api;
})();
// Under Node (its tests), the same object is the module (a cast keeps it a script to tsc).
if (typeof module === "object" && module) /** @type {{exports: unknown}} */ (module).exports = PicoMarkdown;
