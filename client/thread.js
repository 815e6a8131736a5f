// @ts-check
/**
 * The conversation: the requests shown, one frame rendered into its request (live,
 * replayed or from a history), a request's end, and a session's history shown and
 * reattached. Streaming text is stream.js's.
 */
"use strict";
const thread = $("thread"), log = $("log");
/** @param {() => string} getText @param {() => Node} selectNode */
function copyButton(getText, selectNode) {
  const btn = el("button", "copy", "Copy");
  btn.addEventListener("click", async () => {
    try { await navigator.clipboard.writeText(getText()); btn.textContent = "Copied"; }
    catch { const r = document.createRange(); r.selectNodeContents(selectNode()); const s = getSelection(); s.removeAllRanges(); s.addRange(r); btn.textContent = "Selected"; }
    setTimeout(() => (btn.textContent = "Copy"), 1200);
  });
  return btn;
}
PicoMarkdown.onCodeBlock = (wrap, text, c) => wrap.appendChild(copyButton(text, () => c));

// ==== Conversation view ====
function nearBottom() { return log.scrollHeight - log.scrollTop - log.clientHeight < 160; }
function toBottom() { log.scrollTop = log.scrollHeight; updateJump(); }
function updateJump() { $("jump").hidden = nearBottom(); }
log.addEventListener("scroll", updateJump);
$("jump").addEventListener("click", toBottom);
function clearView(note) {
  app.historyGen++; app.historyInto = null;
  app.requests.clear(); app.pending.clear(); app.pendingNew = null; app.paused = false; app.stepNo = 0;
  thread.replaceChildren();
  const p = el("p", "empty", note || "Ask picogent to look at, change or run something in its working folder.");
  p.id = "empty"; thread.appendChild(p);
  busy();
}
/** @param {string} text */
function addUser(text) {
  const e = $("empty"); if (e) e.remove();
  const u = el("div", "msg user", text); (app.historyInto || thread).appendChild(u); return u;
}
function addAssistant(id) {
  const e = $("empty"); if (e) e.remove();
  const box = el("div", "msg assistant"); box.dataset.state = "running"; box.dataset.id = id;
  (app.historyInto || thread).appendChild(box);
  // From a history: never a running request, even before it is finished rendering.
  const r = { id, runId: null, seq: 0, box, seg: null, steps: new Map(), last: null, done: false, text: "", history: !!app.historyInto };
  app.requests.set(id, r); return r;
}
/** The request's text so far ends (a step or a notice follows it): it is shown to its end. @param {Req} r */
function endText(r) { if (r.seg) { r.seg.end(); r.seg = null; } }
function put(r, node) { endText(r); r.box.appendChild(node); return node; }


// ---- rendering one frame (live, replayed, or from history) ----
/**
 * A frame of request `r` (or an item of its history, `history` set), shown.
 * @typedef {(Frame | Exclude<HistoryItem, {type: "user"}>) & {history?: boolean}} Shown
 * @param {Req} r @param {Shown} f
 */
function render(r, f) {
  switch (f.type) {
    case "text":
      // A new stretch of the answer (after a step) is a new paragraph, in Copy too.
      if (!r.seg && r.text && !r.text.endsWith("\n\n")) r.text += r.text.endsWith("\n") ? "\n" : "\n\n";
      if (!r.seg) { r.seg = new TextSeg(r.box, r.box.querySelector(".msg-actions")); r.segFrom = r.text.length; }
      r.seg.add(f.content); r.text += f.content; break;
    case "thinking": {
      let t = r.box.lastElementChild;
      if (!t || !t.classList.contains("thinking")) { t = put(r, el("details", "thinking")); t.appendChild(el("summary", "", "thinking")); t.appendChild(el("div", "body")); }
      t.lastChild.textContent += f.content; break;
    }
    case "retry":
      // The attempt's text so far is void, on the page and in Copy.
      if (r.seg) { app.pending.delete(r.seg); r.seg.root.remove(); r.text = r.text.slice(0, r.segFrom || 0); r.seg = null; }
      put(r, el("div", "notice", "model call failed: " + f.content +
        (f.attempt ? " · attempt " + f.attempt + (f.of ? " of " + f.of : "") + ", next in " + Math.max(1, Math.round((f.delayMs || 0) / 1000)) + " s" : ""))); break;
    // From a history too: the last one shown is the session's newest run's.
    case "context": app.runContext = { model: f.model, workDir: f.workDir }; context(); break;
    case "tool_use": addStep(r, f); break;
    case "approval": askApproval(r, f); break;
    case "approved": approved(r, f); break;
    case "tool_progress": {
      const d = (f.callId && r.steps.get(f.callId)) || r.last;
      if (d && d.dataset.state === "running") liveOutput(d, f.content || "");
      break;
    }
    case "tool_output": {
      const d = (f.callId && r.steps.get(f.callId)) || r.last;
      if (d) finishStep(d, f); break;
    }
    case "tool_result": { // older servers: a failed call, without tool_output
      const d = r.last; if (d && d.dataset.state === "running" && !r.hasOutput) finishStep(d, { type: "tool_output", callId: "", tool: "", isError: true, content: f.content });
      break;
    }
    case "error":
      app.pausing = false;
      // Stopped or cancelled by a person: said plainly, not shown as a failure.
      if (f.content === "cancelled") { put(r, el("div", "notice stopped", "Stopped. What was done so far is kept.")); r.failed = "cancelled"; break; }
      put(r, el("div", "error-line", f.content)); r.failed = f.content; break;
    case "gap": r.gap = true; put(r, el("div", "notice", "Part of this answer could not be replayed here (" + f.content + "); it is shown in full once it ends.")); break;
    case "interrupted": r.failed = "interrupted"; put(r, el("div", "notice interrupted", "This answer was interrupted: the server stopped while it was being written. What it did is kept in the session.")); break;
    case "state":
      if (f.content === "paused" || f.content === "running") {
        const was = r.paused; r.paused = f.content === "paused";
        r.box.dataset.paused = String(r.paused);
        if (was !== undefined || r.paused) put(r, el("div", "notice", r.paused ? "paused: waiting before the next step" : "resumed"));
        if (!f.history && r.paused) notify("picogent paused", "waiting before the next step");
      } else if (f.content === "compacted") put(r, el("div", "notice", "earlier conversation compacted"));
      break;
    case "instruction": {
      const q = r.box.querySelector('.notice.queued[data-text="' + CSS.escape(f.content) + '"]');
      if (q) { q.textContent = "instruction: " + f.content; q.classList.remove("queued"); r.box.appendChild(q); endText(r); }
      else put(r, el("div", "notice", "instruction: " + f.content));
      break;
    }
    case "checkpoint": {
      // The state after a step belongs to that step: its actions are in the step's body
      // (a line of its own only for the start, and after text).
      const line = r.last && r.last.parentElement;
      if (r.last && line && line.parentElement === r.box && !line.nextElementSibling && stepOf(r.last)?.checkpoint == null) {
        line.dataset.step = String(f.step); stepCheckpoint(r.last, f.step);
      } else {
        const own = el("div", "marker"); own.dataset.step = String(f.step);
        const where = f.step === 0 || !r.last ? "the start" : "step " + (stepOf(r.last)?.no ?? "");
        const rb = el("button", "rollback", "Roll back to here"), br = el("button", "branch", "Branch from here");
        rb.onclick = () => askRollback(r, f.step, where); br.onclick = () => askBranch(r, f.step, where);
        /** @type {HTMLButtonElement} */ (rb).disabled = /** @type {HTMLButtonElement} */ (br).disabled = true;
        own.append(el("span", "", f.step === 0 ? "Start" : "after " + where), rb, br); put(r, own);
      }
      break;
    }
    case "rollback": rolledBack(f.step); put(r, el("div", "notice", f.content)); break;
    case "branch": put(r, el("div", "notice", "branch " + f.content + " from step " + f.step)); break;
    case "usage": { // one model call's tokens and cost: the run's totals are shown
      const u = f.content || {}, t = r.usage || (r.usage = { input: 0, output: 0, cost: 0 });
      t.input += (u.input || 0) + (u.cacheRead || 0) + (u.cacheWrite || 0); t.output += u.output || 0;
      t.cost += (u.cost && u.cost.total) || 0;
      app.lastUsage = t;
      break;
    }
    case "notice": put(r, el("div", "notice", f.content)); break;
    case "label": { // from history: a person's label, shown on its step
      const d = /** @type {HTMLElement | null} */ (thread.querySelector('.step[data-call-id="' + CSS.escape(f.callId) + '"]'));
      if (d) showLabel(d, f.label, f.note || "");
      break;
    }
    case "rating": r.rating = f.rating; break;
    case "done":
      // Text still to render goes on frame by frame; the request finishes after it.
      if (r.seg && !f.history && r.seg.behind()) {
        const seg = r.seg; r.seg = null; seg.then = () => finish(r, f); seg.end();
      } else finish(r, f);
      break;
  }
}
/** Grey out and disable everything after checkpoint `step` (the latest marker of it). */
function rolledBack(step) {
  const sel = '[data-step="' + step + '"]';
  const markers = thread.querySelectorAll(".marker" + sel + ":not(.rolled-back), .stepline" + sel + ":not(.rolled-back)");
  const m = markers[markers.length - 1]; if (!m) return;
  const all = thread.querySelectorAll(".stepline, .marker, .md, .notice, .thinking");
  for (const e of all) {
    if (m.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING && !e.classList.contains("rolled-back")) {
      e.classList.add("rolled-back");
      if (e.classList.contains("stepline") && e.firstElementChild) e.firstElementChild.classList.add("rolled-back");
      for (const b of e.querySelectorAll("button")) { b.disabled = true; b.title = "rolled back"; }
    }
  }
  // Steps are numbered along the conversation as it now is: the next one follows the
  // checkpoint's step, as the session's exports and Compare count.
  let no = 0;
  for (const d of thread.querySelectorAll(".step:not(.rolled-back)")) no = Math.max(no, stepOf(d)?.no || 0);
  app.stepNo = no;
}
/** The request's end: its actions (copy, rate, continue or retry). @param {Req} r @param {{history?: boolean}} f */
function finish(r, f) {
  endText(r);
  for (const d of r.box.querySelectorAll('.step[data-state="running"]')) {
    /** @type {HTMLElement} */ (d).dataset.state = "aborted"; const st = stepOf(d); if (st) st.live = false;
  }
  r.done = true; r.box.dataset.state = "done"; r.box.dataset.paused = "false";
  const acts = el("div", "msg-actions");
  const copy = el("button", "copy-answer", "Copy answer");
  copy.onclick = async () => { try { await navigator.clipboard.writeText(r.text); copy.textContent = "Copied"; } catch { copy.textContent = "Copy failed"; } setTimeout(() => (copy.textContent = "Copy answer"), 1200); };
  acts.appendChild(copy);
  rateRow(r, acts, f.history);
  // Interrupted by a restart, or out of steps: the run goes on from where it is, not
  // from its prompt again.
  if (r.failed && (/^interrupted/.test(r.failed) || /\(max_steps\)/.test(r.failed))) {
    const go = el("button", "continue", "Continue");
    go.onclick = () => { field("input").value = "Continue where you left off."; send(); };
    acts.appendChild(go);
  } else if (r.failed && r.prompt && !/cancelled/.test(r.failed)) {
    const retry = el("button", "retry", "Retry"); retry.onclick = () => { field("input").value = r.prompt || ""; send(); }; acts.appendChild(retry);
    if (/401|unauthori[sz]ed|invalid.*key|authentication/i.test(r.failed)) put(r, el("div", "notice", "the model refused the API key: check ANTHROPIC_API_KEY / PICOGENT_API_KEY on the server"));
  }
  r.box.appendChild(acts);
  app.requests.delete(r.id);
  // Part of it was not replayed: the session has it all.
  if (r.gap && !f.history && app.session) sendControl({ type: "history", sessionId: app.session });
  if (!f.history) {
    forgetRun(r.runId);
    notify("picogent finished", r.failed ? "failed: " + r.failed : "the run finished");
    if (document.hidden) document.title = "✓ picogent";
    // The sidebar's "running" mark and order change with it.
    sessionEnded(r.sessionId || app.session);
  }
  busy();
}

// ---- frames from the server ----
/** A frame from the server. @param {Frame} f */
function onFrame(f) {
  switch (f.type) {
    case "compare": return showCompare(f);
    case "branches": return showBranches(f);
    case "prefer": return showNotice("preference " + f.content);
    case "annotated": return acknowledged(f);
    case "preview": return showPreview(f);
    case "history": return showHistory(f);
    case "sessions": return showSessions(f);
    case "deleted": case "renamed": return refreshSessions();
    case "started": return followStarted(f);
  }
  // A keepAlive run is also answered by its runId (a subscribe after a restart).
  const byRun = (run) => [...app.requests.values()].find((x) => x.runId === run);
  const r = (f.id != null ? app.requests.get(String(f.id)) || byRun(String(f.id)) : null) || (f.runId ? byRun(f.runId) : null);
  if (!r) {
    if (f.type === "error" && app.previews.has(String(f.id))) return showPreview(f);
    if (f.type === "error" && app.annotating.has(String(f.id))) return acknowledged(f);
    if (f.type === "error" && (!f.sessionId || f.sessionId === app.session)) showError(f.content);
    // A rollback of the session between runs: what came after the checkpoint is void.
    if (f.type === "rollback" && f.sessionId === app.session) { rolledBack(f.step); showNotice(f.content); busy(); }
    return;
  }
  if (f.seq) { if (f.seq <= r.seq) return; r.seq = f.seq; }
  if (f.runId && !r.runId) { r.runId = f.runId; rememberRun(r); }
  if (f.sessionId && !r.sessionId) r.sessionId = f.sessionId;
  // Only the request this view sent without a session names the view's session.
  if (f.sessionId && app.pendingNew === r.id && !app.session) { app.pendingNew = null; setSession(f.sessionId, r.prompt); }
  const stick = f.type !== "text" && nearBottom();
  render(r, f);
  if (f.type !== "text" && f.type !== "thinking") busy();
  if (stick) toBottom();
}
function showError(text) { thread.appendChild(el("div", "error-line", text)); if (nearBottom()) toBottom(); }
function showNotice(text) { thread.appendChild(el("div", "notice", text)); if (nearBottom()) toBottom(); }
/** The frame fields that address a request: its runId when known (any connection may use it). */
function target(r) { return r.runId ? { runId: r.runId } : { id: r.id }; }

// ---- history and reattach ----
/** Shows a session's history in slices of about 30 ms with the page free between them,
 * so a long session (hundreds of steps, long answers) never holds it. */
/** @param {Extract<Frame, {type: "history"}>} f */
async function showHistory(f) {
  if (f.sessionId !== app.session) return;
  const gen = ++app.historyGen;
  const { items, running } = f.content;
  // The history goes first in the thread, whatever arrives or is sent meanwhile.
  const into = el("div", "history-items");
  thread.replaceChildren(into); app.requests.clear(); app.pending.clear(); app.historyInto = into; app.stepNo = 0;
  let r = null, n = 0, slice = performance.now();
  const breathe = async () => {
    if (performance.now() - slice < 30) return true;
    app.historyInto = null;
    await new Promise((ok) => setTimeout(ok, 0));
    slice = performance.now();
    if (gen !== app.historyGen || f.sessionId !== app.session) return false;
    app.historyInto = into; return true;
  };
  for (const it of items) {
    if (!(await breathe())) return;
    if (it.type === "user") {
      if (r) finish(r, { history: true });
      addUser(it.content); r = addAssistant("h" + (++n)); r.prompt = it.content; continue;
    }
    if (!r) r = addAssistant("h" + (++n));
    render(r, Object.assign({ history: true }, it));
    // A long answer is laid out a budget at a time too.
    while (it.type === "text" && r.seg && r.seg.behind()) { if (!r.seg.render()) break; if (!(await breathe())) return; }
  }
  if (r) finish(r, { history: true });
  app.historyInto = null;
  // Only the session's last answer is offered to continue, and only while nothing runs.
  const answers = thread.querySelectorAll(".msg.assistant"), lastAnswer = answers[answers.length - 1];
  for (const b of thread.querySelectorAll("button.continue")) if (running.length || !lastAnswer || !lastAnswer.contains(b)) b.remove();
  for (const run of running) {
    addUser(run.prompt); const rr = addAssistant(run.id); rr.runId = run.runId; rr.prompt = run.prompt;
    sendControl({ type: "subscribe", runId: run.runId, after: 0 });
  }
  if (!items.length && !running.length) clearView("Session " + app.session + " has no messages yet.");
  toBottom(); busy();
}
/** A request another tab started in this session: shown here too, and followed. */
/** @param {Extract<Frame, {type: "started"}>} f */
function followStarted(f) {
  const run = f.content;
  if (f.sessionId !== app.session || !run.runId || [...app.requests.values()].some((r) => r.runId === run.runId)) return;
  addUser(run.prompt); const rr = addAssistant("o-" + run.runId); rr.runId = run.runId; rr.prompt = run.prompt;
  sendControl({ type: "subscribe", runId: run.runId, after: 0 });
  if (nearBottom()) toBottom();
  busy();
}
/** @param {Req} r */
function rememberRun(r) { const runs = store.get("runs", /** @type {Record<string, unknown>} */ ({})); if (r.runId) runs[r.runId] = { session: app.session, id: r.id }; store.set("runs", runs); }
/** @param {string | null} runId */
function forgetRun(runId) { if (!runId) return; const runs = store.get("runs", /** @type {Record<string, unknown>} */ ({})); delete runs[runId]; store.set("runs", runs); }

