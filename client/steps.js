// @ts-check
/**
 * A tool step: its line (state, what it does, its number, its time, a preview line),
 * and its body — arguments, output or diff, the actions at the checkpoint after it, a
 * person's verdict and note — built only when the step is opened, so a run of hundreds
 * of steps costs a line each. Its state is in `app.steps`.
 */
"use strict";

/** @param {number} ms */
function fmtMs(ms) {
  if (ms < 1000) return ms < 100 ? "<0.1 s" : (ms / 1000).toFixed(1) + " s";
  const s = Math.round(ms / 1000); return s < 60 ? s + " s" : Math.floor(s / 60) + " min " + (s % 60) + " s";
}
/** @param {HTMLElement} body @param {string} title @param {HTMLElement} node */
function section(body, title, node) { body.appendChild(el("div", "k", title)); body.appendChild(node); return node; }
/** A long block folded to its first lines, with a button to show all. @param {HTMLElement} pre @param {number} lines */
function foldable(pre, lines) {
  if (lines <= 14) return pre;
  const wrap = el("div"); pre.classList.add("folded"); wrap.appendChild(pre);
  const b = el("button", "fold", "show all " + lines + " lines");
  b.onclick = () => { const f = pre.classList.toggle("folded"); b.textContent = f ? "show all " + lines + " lines" : "fold"; };
  wrap.appendChild(b); return wrap;
}
/** @param {string} diff */
function diffPre(diff) {
  const pre = el("pre", "diff");
  for (const line of diff.replace(/\n$/, "").split("\n")) {
    const cls = line.startsWith("+++") || line.startsWith("---") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
    pre.appendChild(cls ? el("span", cls, line) : document.createTextNode(line + "\n"));
  }
  return foldable(pre, diff.split("\n").length);
}
/** @param {string} tool @param {any} args */
function argsView(tool, args) {
  if (!args || typeof args !== "object") return null;
  const t = (tool || "").toLowerCase();
  if (t === "bash" && typeof args.command === "string") return el("pre", "term", "$ " + args.command);
  if (t === "write" && typeof args.content === "string") {
    const pre = el("pre"); pre.appendChild(el("strong", "", args.path + "\n")); pre.appendChild(document.createTextNode(args.content));
    return foldable(pre, args.content.split("\n").length);
  }
  const text = JSON.stringify(args, null, 2);
  return foldable(el("pre", "", text), text.split("\n").length);
}

/** @typedef {Extract<Frame, {type: "tool_use"}> & {history?: boolean}} ToolUse */
/** @typedef {Extract<Frame, {type: "tool_output"}>} ToolOutput */

/** A new step of `r`, from its `tool_use` frame. @param {Req} r @param {ToolUse} f */
function addStep(r, f) {
  const d = el("details", "step"); d.dataset.state = "running"; d.dataset.tool = f.tool || "";
  const no = ++app.stepNo;
  const s = el("summary");
  s.append(el("span", "st"), el("span", "label", f.content), el("span", "stepno", "step " + no), el("span", "time"));
  d.append(s, el("div", "body"));
  /** @type {StepState} */
  const st = {
    tool: (f.tool || "").toLowerCase(), callId: f.callId || null, sessionId: f.sessionId || app.session, args: f.args,
    started: Date.now(), live: !f.history, history: !!f.history, no, r, output: null, liveText: "",
    checkpoint: null, label: "", note: "",
  };
  app.steps.set(d, st);
  if (st.callId) d.dataset.callId = st.callId;
  // Built as it opens (a click, Enter or Space on the line), so what opens is whole at
  // once; `toggle` (asynchronous) covers other ways it opens.
  s.addEventListener("click", () => { if (!(/** @type {HTMLDetailsElement} */ (d).open)) fillBody(d); });
  // Closed, it holds nothing: a long run costs a line per step.
  d.addEventListener("toggle", () => {
    const body = /** @type {HTMLElement} */ (d.querySelector(".body"));
    if (!(/** @type {HTMLDetailsElement} */ (d).open)) body.replaceChildren();
    else if (!body.firstChild) fillBody(d);
  });
  const line = el("div", "stepline"); line.appendChild(d); put(r, line);
  if (st.callId) r.steps.set(st.callId, d);
  r.last = d;
  return d;
}
/** Builds the step's body from its state (again when the state changed while open).
 * @param {HTMLElement} d */
function fillBody(d) {
  const st = stepOf(d), body = /** @type {HTMLElement} */ (d.querySelector(".body"));
  if (!st || !body) return;
  body.replaceChildren();
  const f = st.output;
  if (!(st.tool === "edit" && !(f && f.isError))) { const a = argsView(st.tool, st.args); if (a) section(body, st.tool === "edit" ? "the edit asked for" : "arguments", a); }
  if (!f && st.liveText) { section(body, "output so far", el("pre", "term live", st.liveText)); }
  if (f) outputView(body, st, f);
  if (st.checkpoint !== null) checkpointRow(body, d, st);
  if (st.callId) annotRow(body, d, st);
}
/** A finished step's result. @param {HTMLElement} body @param {StepState} st @param {ToolOutput} f */
function outputView(body, st, f) {
  const det = /** @type {any} */ (f.details || {}), tool = st.tool;
  if (typeof det.diff === "string" && det.diff) section(body, "diff", diffPre(det.diff));
  if (tool === "bash") {
    const pre = el("pre", "term", f.content || "(no output)");
    section(body, "output", foldable(pre, (f.content || "").split("\n").length));
    if (det.exit_code !== undefined && det.exit_code !== null) body.appendChild(el("div", "exit" + (det.exit_code ? " bad" : ""), "exit code " + det.exit_code + (det.timed_out ? " (timed out)" : "")));
  } else if (tool === "read" && !f.isError) {
    const first = det.first_line || 1, lines = (f.content || "").split("\n");
    section(body, "lines " + first + "–" + (det.last_line || first + lines.length - 1) + (det.total_lines ? " of " + det.total_lines : ""), foldable(el("pre", "", f.content), lines.length));
  } else if (!(typeof det.diff === "string" && det.diff) || f.isError) {
    const text = f.content || "(no output)";
    section(body, f.isError ? "error" : tool === "grep" ? "matches" : "output", foldable(el("pre", "", text), text.split("\n").length));
  }
}
/** The files and conversation as this step left them: roll back to it, or branch from it.
 * @param {HTMLElement} body @param {HTMLElement} d @param {StepState} st */
function checkpointRow(body, d, st) {
  const row = el("div", "after-step"); row.appendChild(el("span", "k", "after this step:"));
  const rb = el("button", "rollback", "Roll back to here"); rb.onclick = () => askRollback(st.r, st.checkpoint, "step " + st.no);
  const br = el("button", "branch", "Branch from here"); br.onclick = () => askBranch(st.r, st.checkpoint, "step " + st.no);
  row.append(rb, br); body.appendChild(row);
  for (const b of [rb, br]) /** @type {HTMLButtonElement} */ (b).disabled = !checkpointOpen(st.r) || d.classList.contains("rolled-back");
}
/** Whether a request's checkpoints can be gone back to now: a running request while it
 * is paused (the server refuses it otherwise); a finished one once nothing runs.
 * @param {Req} r */
function checkpointOpen(r) { return r.done ? live().length === 0 : !!r.paused; }
/** After a step: the checkpoint the server took (a line gets its actions when opened). @param {HTMLElement} d @param {number} step */
function stepCheckpoint(d, step) {
  const st = stepOf(d); if (!st) return;
  st.checkpoint = step; d.dataset.checkpoint = String(step);
  if (/** @type {HTMLDetailsElement} */ (d).open) fillBody(d);
}

// ---- a running command's output, and a step's end ----
/** How much of a running command's output the step keeps (its last characters). */
const LIVE_CHARS = 20000;
/** @param {HTMLElement} d @param {string} text */
function liveOutput(d, text) {
  const st = stepOf(d); if (!st) return;
  let all = st.liveText + text;
  if (all.length > LIVE_CHARS) all = "…" + all.slice(all.length - LIVE_CHARS);
  st.liveText = all;
  const pre = /** @type {HTMLElement | null} */ (d.querySelector(".body pre.live"));
  if (pre) {
    const follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    pre.textContent = all;
    if (follow) pre.scrollTop = pre.scrollHeight;
  } else if (/** @type {HTMLDetailsElement} */ (d).open) fillBody(d);
  setTail(d, tailLine(st.tool, { content: all, isError: false }));
}
/** @param {HTMLElement} d @param {string} text */
function setTail(d, text) {
  const summary = /** @type {HTMLElement} */ (d.querySelector("summary"));
  let tail = summary.querySelector(".tail");
  if (!text) { if (tail) tail.remove(); return; }
  if (!tail) { tail = el("span", "tail"); summary.appendChild(tail); }
  tail.textContent = text;
}
/** @param {HTMLElement} d @param {ToolOutput & {history?: boolean}} f */
function finishStep(d, f) {
  const st = stepOf(d); if (!st) return;
  st.output = f; st.live = false; st.liveText = "";
  if (f.tool) st.tool = f.tool.toLowerCase();
  d.dataset.state = f.isError ? "error" : "done";
  d.classList.toggle("error", !!f.isError);
  // Success or failure in words too, not only as a coloured mark.
  const mark = d.querySelector("summary .st");
  if (mark) mark.replaceChildren(el("span", "sr-only", f.isError ? "failed: " : "done: "));
  setTail(d, tailLine(st.tool, f));
  const t = /** @type {HTMLElement} */ (d.querySelector(".time"));
  if (typeof f.durationMs === "number") t.textContent = fmtMs(f.durationMs);
  else if (!st.history) t.textContent = fmtMs(Date.now() - st.started);
  else t.textContent = "";
  if (/** @type {HTMLDetailsElement} */ (d).open) fillBody(d);
}
/** A line the tools add about their output, not the output itself. */
const TOOL_NOTE = /^\[(Showing|Output cut|Full output)|^Command (exited with code|was killed by signal|timed out after|aborted)/;
/** Where an error says what went wrong. */
const ERROR_LINE = /error|fail|panic|exception|denied|not found|no such|cannot|can't|invalid|traceback/i;
/**
 * The line a step shows under its summary: what a person wants to see without opening
 * it. An edit's or write's first changed line; a failed command's error (the last line
 * that reads like one, else its last line); otherwise the output's last line. The
 * tools' own notes (truncation, exit codes) are never the preview.
 * @param {string} tool @param {{content?: string, isError?: boolean, details?: unknown}} f
 */
function tailLine(tool, f) {
  const det = /** @type {any} */ (f.details || {});
  let line = "";
  if (typeof det.diff === "string" && det.diff && !f.isError) {
    const changed = det.diff.split("\n").filter((/** @type {string} */ l) => /^[+-]/.test(l) && !/^(\+\+\+|---)/.test(l));
    line = changed.find((/** @type {string} */ l) => l.startsWith("+")) || changed[0] || "";
  } else {
    const lines = String(f.content || "").split("\n").map((l) => l.trim()).filter((l) => l && !TOOL_NOTE.test(l));
    if (f.isError && tool === "bash") line = [...lines].reverse().find((l) => ERROR_LINE.test(l)) || lines[lines.length - 1] || "";
    else line = (f.isError ? lines[0] : lines[lines.length - 1]) || "";
    if (!line && f.isError) line = String(f.content || "").trim().split("\n").pop() || "";
  }
  return line.length > 160 ? line.slice(0, 159) + "…" : line;
}
setInterval(() => {
  for (const r of app.requests.values()) for (const d of r.box.querySelectorAll('.step[data-state="running"]')) {
    const st = stepOf(d), t = d.querySelector(".time");
    if (st && st.live && t) t.textContent = fmtMs(Date.now() - st.started);
  }
  context(); labelProgress();
}, 1000);

// ---- approvals ----
/** The four answers to a call waiting for approval, as the buttons say them. */
const APPROVAL_ANSWERS = /** @type {const} */ ([
  ["allow_once", "Allow"], ["allow_always", "Always allow "], ["reject_once", "Reject"], ["reject_always", "Always reject "],
]);
/** A call waits for a person's yes: a prompt under its step with the four answers
 * (Tab reaches them; the first takes the keyboard when nothing else has it).
 * @param {Req} r @param {Extract<Frame, {type: "approval"}>} f */
function askApproval(r, f) {
  const d = r.steps.get(f.callId);
  const line = d ? d.parentElement : null;
  if (!line || line.querySelector(".approval")) return;
  const box = el("div", "approval");
  box.setAttribute("role", "group");
  box.setAttribute("aria-label", "Approve " + f.content);
  box.appendChild(el("span", "q", "Run " + f.content + "?"));
  // The command whole (the line above is cut), with what could hide part of it shown
  // as escapes: control characters and the marks that reorder text.
  const st = d ? app.steps.get(d) : undefined;
  const args = /** @type {{command?: unknown} | null | undefined} */ (st && st.args);
  const cmd = args && typeof args.command === "string" ? args.command : null;
  if (cmd) box.appendChild(el("pre", "cmd", cmd.replace(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, (c) => "\\u{" + c.charCodeAt(0).toString(16) + "}")));
  for (const [answer, label] of APPROVAL_ANSWERS) {
    const b = el("button", answer.startsWith("reject") ? "reject" : "allow", label.endsWith(" ") ? label + f.tool : label);
    b.dataset.answer = answer;
    b.onclick = () => {
      for (const x of box.querySelectorAll("button")) /** @type {HTMLButtonElement} */ (x).disabled = true;
      sendControl(Object.assign({ type: "approve", callId: f.callId, answer }, target(r)));
    };
    box.appendChild(b);
  }
  line.appendChild(box);
  if (d) d.dataset.state = "waiting";
  if (!document.activeElement || document.activeElement === document.body) /** @type {HTMLElement} */ (box.querySelector("button")).focus();
}
/** A call was answered (here or in another tab): its prompt goes, the step says a no.
 * @param {Req} r @param {Extract<Frame, {type: "approved"}>} f */
function approved(r, f) {
  const d = r.steps.get(f.callId);
  if (!d || !d.parentElement) return;
  const box = d.parentElement.querySelector(".approval");
  const hadFocus = box && box.contains(document.activeElement);
  if (box) box.remove();
  if (d.dataset.state === "waiting") d.dataset.state = "running";
  if (f.answer.startsWith("reject")) d.dataset.rejected = f.answer;
  if (hadFocus) field("input").focus();
}
