// @ts-check
/**
 * Dialogs in the page (never window.prompt): a question with fields, a rollback or
 * branch with the files it puts back, and the comparison of two branches. Each takes
 * the keyboard (Tab stays inside, Escape closes) and gives it back where it was.
 */
"use strict";

/** @param {string} kind @returns {HTMLElement} */
function modal(kind) {
  const m = $("modal");
  if (m.hidden) app.beforeModal = document.activeElement;
  m.hidden = false; m.dataset.kind = kind;
  const card = /** @type {HTMLElement} */ (m.firstElementChild); card.replaceChildren(); card.id = ""; card.removeAttribute("aria-labelledby"); return card;
}
/** The dialog's heading, which also names it. @param {HTMLElement} card @param {string} text */
function titled(card, text) {
  const h = el("h3", "", text); h.id = "modal-title"; card.appendChild(h); card.setAttribute("aria-labelledby", "modal-title"); return h;
}
/** Gives the keyboard back to where it was before a dialog (else the message field). */
function giveBack() {
  const was = /** @type {HTMLElement | null} */ (app.beforeModal);
  const back = was && was.isConnected ? was : $("input"); app.beforeModal = null; back.focus();
}
function closeModal() { $("modal").hidden = true; giveBack(); }
/** Tab and Shift+Tab go round inside `box`. @param {HTMLElement} box @param {KeyboardEvent} e */
function trapTab(box, e) {
  const all = /** @type {HTMLElement[]} */ ([...box.querySelectorAll("button, input, textarea, select, [tabindex]")])
    .filter((x) => !(/** @type {HTMLButtonElement} */ (x)).disabled && x.offsetParent !== null);
  if (!all.length) return;
  const first = all[0], last = all[all.length - 1];
  if (e.shiftKey && document.activeElement === first) { e.preventDefault(); last.focus(); }
  else if (!e.shiftKey && document.activeElement === last) { e.preventDefault(); first.focus(); }
  else if (!box.contains(document.activeElement)) { e.preventDefault(); first.focus(); }
}
$("modal").addEventListener("keydown", (e) => {
  if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); closeModal(); return; }
  if (e.key === "Tab") trapTab($("modal"), e);
});
$("modal").addEventListener("click", (e) => { if (e.target === $("modal")) closeModal(); });

/**
 * A field of a question: text (one line or `multi`), one of `choices` (radio buttons
 * with a legend), or a `note` node shown as it is.
 * @typedef {{name?: string, label?: string, multi?: boolean, required?: boolean, placeholder?: string,
 *   value?: string, choices?: [string, string][], note?: HTMLElement}} AskField
 */
/** @param {string} title @param {AskField[]} fields @param {string} okText @param {(v: Record<string, string>) => void} onOk */
function ask(title, fields, okText, onOk) {
  const card = modal("ask"); titled(card, title);
  /** @type {Record<string, () => string>} */
  const values = {};
  /** @type {Record<string, HTMLElement>} */
  const inputs = {};
  for (const f of fields) {
    if (f.note) { card.appendChild(f.note); continue; }
    const name = f.name || "";
    if (f.choices) {
      const set = el("fieldset", "choices"); set.appendChild(el("legend", "", f.label));
      for (const [value, text] of f.choices) {
        const lab = el("label"), r = /** @type {HTMLInputElement} */ (el("input"));
        r.type = "radio"; r.name = name; r.value = value; r.checked = value === f.value;
        lab.append(r, " " + text); set.appendChild(lab);
      }
      card.appendChild(set);
      values[name] = () => { const c = /** @type {HTMLInputElement | null} */ (set.querySelector("input:checked")); return c ? c.value : ""; };
      inputs[name] = /** @type {HTMLElement} */ (set.querySelector("input:checked") || set.querySelector("input"));
      continue;
    }
    const lab = el("label", "", f.label); const inp = /** @type {HTMLInputElement} */ (el(f.multi ? "textarea" : "input")); if (!f.multi) inp.type = "text";
    inp.name = name; inp.placeholder = f.placeholder || ""; inp.value = f.value || "";
    lab.appendChild(el("br")); lab.appendChild(inp); card.appendChild(lab);
    values[name] = () => inp.value.trim(); inputs[name] = inp;
  }
  const row = el("div", "row"); const cancel = el("button", "", "Cancel"); const ok = el("button", "primary ok", okText);
  cancel.onclick = closeModal;
  ok.onclick = () => {
    /** @type {Record<string, string>} */
    const v = {}; for (const k in values) v[k] = values[k]();
    const missing = fields.find((f) => f.required && f.name && !v[f.name]);
    if (missing && missing.name) { inputs[missing.name].focus(); return; }
    closeModal(); onOk(v);
  };
  // One handler, this dialog's (the card is reused: a listener added per dialog would
  // press every earlier dialog's OK too).
  card.onkeydown = (e) => {
    const t = /** @type {HTMLElement} */ (e.target);
    if (e.key === "Enter" && !e.shiftKey && t.tagName === "INPUT") { e.preventDefault(); ok.click(); }
  };
  row.append(cancel, ok); card.appendChild(row);
  // A field to fill when there is one; otherwise the safe choice, Cancel.
  const first = /** @type {HTMLElement | null} */ (card.querySelector("input:checked, input[type=text], textarea, input"));
  (first || cancel).focus();
}

// ---- rollback and branch ----
/** The files a rollback to checkpoint `step` puts back, from the server's `preview`
 * (the checkpoint's diff); filled in when the answer comes.
 * @param {number} step @param {string} where @param {string} sid */
function previewNote(step, where, sid) {
  const n = el("div", "scroll preview"); n.appendChild(el("p", "", "Checking which files go back to how they were after " + where + "…"));
  const id = nextId("pv"); app.previews.set(id, n); n.dataset.where = where;
  sendControl({ type: "preview", id, sessionId: sid, step });
  return n;
}
/** @param {{id?: string | null, type: string, content?: any, step?: number}} f */
function showPreview(f) {
  const n = app.previews.get(String(f.id)); if (!n) return; app.previews.delete(String(f.id));
  n.replaceChildren();
  if (f.type === "error") { n.appendChild(el("p", "error-line", "no preview: " + f.content)); return; }
  const files = (f.content && f.content.files) || [], where = n.dataset.where;
  n.appendChild(el("p", "", files.length ? "These files go back to how they were after " + where + ":" : "No file changed since " + where + "; only the conversation goes back."));
  const ul = el("ul", "preview-files");
  /** @type {Record<string, string>} */
  const what = { added: "created since: deleted", deleted: "deleted since: restored", modified: "modified: restored" };
  for (const file of files) {
    const li = el("li"); li.dataset.status = file.status; li.appendChild(el("code", "", file.path));
    const counts = file.added === undefined ? "" : " (+" + file.added + " −" + file.removed + ")";
    li.appendChild(document.createTextNode(" · " + (what[file.status] || file.status) + counts)); ul.appendChild(li);
  }
  n.appendChild(ul);
  if (f.content.diff) { const d = el("details"); d.appendChild(el("summary", "", "diff")); d.appendChild(diffPre(f.content.diff)); n.appendChild(d); }
}
/** Rollback and branch go to a running request (it must be paused); once its run has
 * ended, to the session, which continues from the checkpoint. `where` names the point
 * as the page numbers it ("step 3", "the start").
 * @param {Req} r @param {number | null} step @param {string} where */
function askRollback(r, step, where) {
  if (step === null) return;
  const sid = r.sessionId || app.session;
  ask("Roll back to after " + where + "?", [{ note: previewNote(step, where, sid) }], "Roll back", () => {
    if (!r.done) return sendControl(Object.assign({ type: "rollback", step }, target(r)));
    sendControl({ type: "rollback", id: nextId("rb"), sessionId: sid, step });
  });
}
/** @param {Req} r @param {number | null} step @param {string} where */
function askBranch(r, step, where) {
  if (step === null) return;
  const sid = r.sessionId || app.session;
  ask("Branch from after " + where, [{ note: previewNote(step, where, sid) }, { name: "content", label: "Instruction for the new branch", multi: true, required: true }, { name: "name", label: "Branch name (empty for automatic)" }],
    "Branch", (v) => {
      if (!r.done) return sendControl(Object.assign({ type: "branch", step, content: v.content, name: v.name || undefined }, target(r)));
      if (live().length) return showNotice("branch: wait for the running request to end");
      const id = "msg-" + Date.now().toString(36) + "-" + (++app.counter);
      addUser(v.content); const nr = addAssistant(id); nr.prompt = v.content;
      sendControl({ type: "branch", id, sessionId: sid, step, content: v.content, name: v.name || undefined, keepAlive: true });
      busy(); toBottom();
    });
}

// ---- compare ----
/** The comparison view, a dialog: it takes the keyboard and Escape closes it. @param {string} title */
function compareShell(title) {
  const view = $("compare-view");
  if (view.hidden) app.beforeCompare = document.activeElement;
  view.replaceChildren(); view.hidden = false;
  const head = el("div", "head"), h = el("h3", "", title); h.id = "compare-title"; head.appendChild(h);
  const close = el("button", "close", "Close"); close.onclick = closeCompare; head.appendChild(close);
  view.appendChild(head); const body = el("div", "scroll"); view.appendChild(body);
  close.focus();
  return body;
}
function closeCompare() {
  const view = $("compare-view"); if (view.hidden) return; view.hidden = true;
  const was = /** @type {HTMLElement | null} */ (app.beforeCompare);
  app.beforeCompare = null; (was && was.isConnected ? was : $("input")).focus();
}
$("compare-view").addEventListener("keydown", (e) => {
  if (e.key === "Escape" && $("modal").hidden) { e.preventDefault(); e.stopPropagation(); closeCompare(); }
  else if (e.key === "Tab") trapTab($("compare-view"), e);
});
/** @param {Extract<Frame, {type: "branches"}>} f */
function showBranches(f) {
  const body = compareShell("Branches of session " + f.sessionId);
  const list = el("ul", "branch-list");
  for (const b of f.content) list.appendChild(el("li", "", b.name + " · " + b.steps + " step" + (b.steps === 1 ? "" : "s")));
  body.appendChild(list);
  const pick = (/** @type {string} */ id, /** @type {number} */ sel, /** @type {string} */ label) => {
    const s = /** @type {HTMLSelectElement} */ (el("select")); s.id = id; s.setAttribute("aria-label", label);
    for (const b of f.content) { const o = /** @type {HTMLOptionElement} */ (el("option", "", b.name)); o.value = b.name; s.appendChild(o); }
    s.selectedIndex = sel; return s;
  };
  const a = pick("compare-a", 0, "first branch"), b = pick("compare-b", Math.max(0, f.content.length - 1), "second branch");
  const go = el("button", "primary", "Compare"); go.id = "compare-go";
  go.onclick = () => sendControl({ type: "compare", sessionId: f.sessionId, a: a.value, b: b.value });
  const row = el("div"); row.append(a, " vs ", b, " ", go); body.appendChild(row);
  a.focus();
}
/** @param {Extract<Frame, {type: "compare"}>} f */
function showCompare(f) {
  const c = f.content;
  const body = compareShell("Compare " + c.a.name + " and " + c.b.name + " (" + c.shared_steps + " shared step" + (c.shared_steps === 1 ? "" : "s") + ")");
  const cols = el("div", "cols");
  const chosen = store.get("prefer." + f.sessionId, /** @type {Record<string, boolean>} */ ({}));
  for (const side of [c.a, c.b]) {
    const other = side === c.a ? c.b : c.a;
    const col = el("div"); col.appendChild(el("strong", "", side.name));
    if (chosen[side.name + ">" + other.name]) { col.classList.add("chosen"); col.appendChild(el("span", "notice", " · chosen")); }
    // Numbered as the conversation numbers steps: tool steps, after the shared ones.
    const ol = el("ul", "steps"); let n = c.shared_steps;
    for (const s of side.steps) {
      if (s.type === "text") ol.appendChild(el("li", "text", s.text));
      else ol.appendChild(el("li", "tool", "step " + (++n) + " · " + (s.args_summary || s.tool) + (s.result_summary ? " → " + s.result_summary : "")));
    }
    col.appendChild(ol);
    const better = el("button", "better", side.name + " is better");
    better.onclick = () => ask(side.name + " is better than " + other.name, [{ name: "note", label: "Note (optional)" }], "Record", (v) => {
      sendControl({ type: "prefer", sessionId: f.sessionId, chosen: side.name, rejected: other.name, note: v.note || undefined });
      chosen[side.name + ">" + other.name] = true; store.set("prefer." + f.sessionId, chosen); col.classList.add("chosen");
    });
    col.appendChild(better); cols.appendChild(col);
  }
  body.appendChild(cols);
  if (c.diff) { body.appendChild(el("div", "k", "files: " + c.a.name + " → " + c.b.name)); body.appendChild(diffPre(c.diff)); }
}
