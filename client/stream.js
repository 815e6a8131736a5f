// @ts-check
/**
 * Streaming Markdown: an answer's text shown as it comes, however long and however
 * fast. Blocks before the last are final once a later block has begun: they are built
 * once and kept, and only the last block is parsed again as text comes. Rendering runs
 * once per animation frame for at most FRAME_MS, a step of at most STEP_CHARS at a time
 * (to a line's end), so a burst of text never makes a long main-thread task, and a
 * megabyte that came in seconds is shown within a second or two of its last byte.
 *
 * Final blocks go into chunks of CHUNK_BLOCKS, each laid out only while near the
 * screen (`content-visibility: auto`): the page's layout work per frame stays the size
 * of what is new, not of the whole answer. A fenced code block longer than LIVE_CODE
 * that is still open grows a step of lines at a time instead of being parsed again
 * (a generated file of a megabyte is one block).
 */
"use strict";

/** Rendering time per animation frame, in milliseconds. */
const FRAME_MS = 8;
/** New text parsed per step, in characters (to a line's end). */
const STEP_CHARS = 4096;
/** Final blocks per chunk. */
const CHUNK_BLOCKS = 48;
/** An open code block longer than this grows line by line. */
const LIVE_CODE = 8192;
/** A last block longer than this is parsed again only as it grows by half. */
const BIG_BLOCK = 65536;
/** Text still to show when a segment ends that is shown at once; more goes on frame by frame. */
const END_AT_ONCE = 32768;

class TextSeg {
  /** @param {HTMLElement} parent @param {Element | null} before */
  constructor(parent, before) {
    /** Everything that came, line ends made "\n"; what is shown; where the last
     * (not yet final) block starts. */
    this.src = ""; this.shown = 0; this.frozenOff = 0;
    /** The last block's nodes (replaced at each step), and the chunk final blocks go in. */
    /** @type {Node[]} */
    this.tail = [];
    /** @type {HTMLElement | null} */
    this.chunk = null; this.inChunk = 0;
    /** A "\r" ended the last piece; no more text comes; run when everything is shown. */
    this.cr = false; this.ended = false;
    /** When the last block was last parsed, and how long that took. */
    this.parsedAt = 0; this.parseMs = 0;
    /** @type {(() => void) | null} */
    this.then = null;
    /** The open code block growing line by line, if any. */
    /** @type {{close: RegExp, strip: RegExp, lang: string, code: HTMLElement, wrap: HTMLElement, lines: string[]} | null} */
    this.live = null;
    this.root = el("div", "md"); parent.insertBefore(this.root, before || null);
  }
  // Line ends are made "\n" as text comes, so offsets in `src` are offsets in what is
  // parsed; a "\r" that ends a piece waits for the next one (a "\r\n" split in two).
  /** @param {string} text */
  add(text) {
    if (this.cr) text = "\r" + text;
    this.cr = text.endsWith("\r");
    if (this.cr) text = text.slice(0, -1);
    this.src += text.replace(/\r\n?/g, "\n"); schedule(this);
  }
  /** No more text comes: a last "\r" is a line end, and what is left is shown. */
  end() {
    this.ended = true;
    if (this.cr) { this.cr = false; this.src += "\n"; }
    if (this.src.length - this.shown <= END_AT_ONCE) this.render(true); else schedule(this);
  }
  /** Where a step ends: a line's end after at most STEP_CHARS new characters. */
  stepEnd() {
    const end = this.src.length, limit = this.shown + STEP_CHARS;
    if (end <= limit) return end;
    const cut = this.src.lastIndexOf("\n", limit);
    if (cut >= this.shown) return cut + 1;
    // One line longer than a step: all of it.
    const next = this.src.indexOf("\n", limit);
    return next < 0 ? end : next + 1;
  }
  /** Where the line holding `at` ends (after its "\n"), or the end of the text. @param {number} at */
  lineEnd(at) { const nl = this.src.indexOf("\n", at); return nl < 0 ? this.src.length : nl + 1; }
  /** Parses the last block and the next step's text; all but the new last block are
   * final. Whether anything more is shown. */
  step() {
    if (this.live) return this.liveStep();
    let end = this.stepEnd();
    if (end - this.frozenOff > LIVE_CODE && this.openFence(end)) return this.liveStep();
    // Another long block (a table, a list) still growing is parsed again, with text in
    // proportion to it, once it grew by half or parsing it would take a tenth of the
    // time since: its cost stays linear in its length, and it still grows on a slow
    // stream.
    const t0 = performance.now(), open = end - this.frozenOff;
    if (open > BIG_BLOCK) {
      end = Math.min(this.src.length, this.lineEnd(this.shown + Math.max(STEP_CHARS, open)));
      const soon = t0 - this.parsedAt < 10 * this.parseMs;
      if (!this.ended && end - this.shown < open / 2 && soon) { schedule(this); return false; }
    }
    this.shown = end;
    const text = this.src.slice(this.frozenOff, end);
    // A line still being written decides nothing about the blocks before it ("#" may
    // become "#tag", "***" "***bold***"): only complete lines make blocks final.
    const cut = !this.ended && !text.endsWith("\n") ? text.lastIndexOf("\n") + 1 : text.length;
    const lines = text.slice(0, cut).split("\n");
    const bs = PicoMarkdown.blocks(lines);
    for (const n of this.tail) this.root.removeChild(n);
    this.tail = [];
    for (let k = 0; k < bs.length - 1; k++) this.freeze(bs[k].node);
    // The last block starts here (no block: only blank lines, passed over).
    const from = bs.length ? bs[bs.length - 1].start : lines.length - 1;
    let off = 0; for (let k = 0; k < from; k++) off += lines[k].length + 1;
    this.frozenOff += off;
    if (cut === text.length) this.tail = bs.length ? [bs[bs.length - 1].node] : [];
    else this.tail = PicoMarkdown.blocks(this.src.slice(this.frozenOff, end).split("\n")).map((b) => b.node);
    for (const n of this.tail) this.root.appendChild(n);
    this.parsedAt = performance.now(); this.parseMs = this.parsedAt - t0;
    return true;
  }
  /** Whether the text from the last block to `end` is a fenced code block not yet
   * closed; if so it becomes the live block. @param {number} end */
  openFence(end) {
    const nl = this.src.indexOf("\n", this.frozenOff);
    if (nl < 0 || nl >= end) return false;
    const m = this.src.slice(this.frozenOff, nl).match(PicoMarkdown.fence);
    if (!m) return false;
    const fence = m[2], close = new RegExp("^ {0,3}" + fence[0] + "{" + fence.length + ",}[ \\t]*$");
    for (let i = nl + 1; i < end;) {
      let j = this.src.indexOf("\n", i); if (j < 0 || j > end) j = end;
      if (close.test(this.src.slice(i, j))) return false;
      i = j + 1;
    }
    for (const n of this.tail) this.root.removeChild(n);
    /** @type {string[]} */
    const lines = [];
    const wrap = PicoMarkdown.codeBlock(m[3], "", () => lines.join("\n"));
    this.live = { close, strip: new RegExp("^ {0," + m[1].length + "}"), lang: m[3], wrap, lines, code: /** @type {HTMLElement} */ (wrap.querySelector("code")) };
    // In a chunk of its own, where it stays when it ends (moving a megabyte of code
    // would lay it all out again).
    this.tail = []; this.chunk = el("div", "mdc"); this.inChunk = CHUNK_BLOCKS;
    this.chunk.appendChild(wrap); this.root.appendChild(this.chunk);
    this.shown = nl + 1;
    return true;
  }
  /** The live code block's next lines (whole lines; the last one too once the text
   * ended), as one coloured run; its closing fence makes it final. */
  liveStep() {
    const L = /** @type {NonNullable<TextSeg["live"]>} */ (this.live), src = this.src, limit = this.shown + STEP_CHARS;
    /** @type {string[]} */
    const got = [];
    let i = this.shown, closed = false;
    while (i < src.length && i < limit) {
      let nl = src.indexOf("\n", i);
      if (nl < 0) { if (!this.ended) break; nl = src.length; }
      const line = src.slice(i, nl); i = Math.min(nl + 1, src.length);
      if (L.close.test(line)) { closed = true; break; }
      got.push(line.replace(L.strip, ""));
    }
    if (!got.length && !closed) return false;
    if (got.length) {
      // Every line ends with its "\n": blank lines stay, and the code's text is whole.
      const run = el("span", "cl"); PicoMarkdown.highlight(got.join("\n") + "\n", L.lang, run);
      L.code.appendChild(run); L.lines.push(...got);
    }
    this.shown = i;
    if (closed) { this.frozenOff = i; this.live = null; }
    return true;
  }
  /** A final block, into the current chunk. @param {HTMLElement} node */
  freeze(node) {
    if (!this.chunk || this.inChunk >= CHUNK_BLOCKS) {
      this.chunk = el("div", "mdc"); this.inChunk = 0; this.root.appendChild(this.chunk);
    }
    this.chunk.appendChild(node); this.inChunk++;
  }
  /** Shows what came, for at most a frame's time (`all`: everything, now); whether it
   * got anywhere (a code line still being written waits for its end). @param {boolean} [all] */
  render(all) {
    const until = performance.now() + FRAME_MS;
    let moved = true;
    do moved = this.step(); while (moved && this.behind() && (all || performance.now() < until));
    // A code line still being written waits for its end (`add` schedules again).
    if (moved && this.behind()) schedule(this);
    else if (this.then && !this.behind()) { const then = this.then; this.then = null; then(); }
    return moved;
  }
  /** More has come than has been shown (a live code block's unfinished line is not
   * shown until it ends). */
  behind() { return this.shown < this.src.length; }
}
/** Renders `seg` at the next animation frame (every 100 ms in a hidden tab). @param {TextSeg} seg */
function schedule(seg) {
  app.pending.add(seg);
  if (app.scheduled) return;
  app.scheduled = true;
  const run = () => { app.scheduled = false; flushText(); };
  if (document.hidden) setTimeout(run, 100); else requestAnimationFrame(run);
}
/** One frame's text, the view kept at the bottom if it was there. */
function flushText() {
  const stick = nearBottom();
  const segs = [...app.pending]; app.pending.clear();
  // A hidden tab's timers run rarely: it shows everything at once.
  for (const s of segs) s.render(document.hidden);
  if (stick) toBottom(); else updateJump();
}
