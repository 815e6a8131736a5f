// @ts-check
/**
 * A person's judgement of the agent's work: a verdict on a step (correct, incorrect or
 * unsure, with a note), a rating of a run, how far labelling got, and moving between
 * steps by keyboard. What the server has not yet acknowledged says "saving…".
 */
"use strict";

/** @type {[string, string][]} */
const VERDICTS = [["correct", "✓ correct"], ["incorrect", "✗ incorrect"], ["unsure", "? unsure"]];

/** Sends a label or rating; `show` says "saving…", then "saved" or why not.
 * @param {Record<string, unknown>} frame @param {(text: string, bad: boolean) => void} show */
function annotate(frame, show) {
  const id = nextId("an"); frame.id = id;
  show("saving…", false); app.annotating.set(id, show); sendControl(frame);
}
/** The server's answer to a label or rating (`annotated`, or an `error` with its id).
 * @param {{id?: string | null, type: string, content?: unknown}} f */
function acknowledged(f) {
  const show = app.annotating.get(String(f.id)); if (!show) return; app.annotating.delete(String(f.id));
  if (f.type === "error") show("not saved: " + f.content, true); else show("saved", false);
}
/** A "saving…/saved" note in `where`. @param {HTMLElement} where */
function savedIn(where) {
  return (/** @type {string} */ text, /** @type {boolean} */ bad) => {
    let s = where.querySelector(":scope > .saved"); if (!s) { s = el("span", "saved"); where.appendChild(s); }
    s.textContent = text; s.classList.toggle("bad", bad);
  };
}
/** Shows a step's verdict (and note) on its line and, when open, in its body.
 * @param {HTMLElement} d @param {string} label @param {string} [note] */
function showLabel(d, label, note) {
  const st = stepOf(d); if (!st) return;
  st.label = label; if (note !== undefined) st.note = note || "";
  d.dataset.label = label;
  d.classList.toggle("has-note", !!st.note);
  const summary = d.querySelector("summary .label");
  if (summary) summary.setAttribute("title", st.note ? "note: " + st.note : "");
  const row = /** @type {HTMLElement | null} */ (d.querySelector(".body .annot"));
  if (row) {
    for (const b of row.querySelectorAll("button[data-label]")) b.setAttribute("aria-pressed", String(/** @type {HTMLElement} */ (b).dataset.label === label));
    const edit = row.querySelector(".label-note"); if (edit) edit.textContent = st.note ? "edit note…" : "with a note…";
    noteLine(row, st.note);
  }
  labelProgress();
}
/** @param {HTMLElement} row @param {string} note */
function noteLine(row, note) {
  let n = /** @type {HTMLElement | null} */ (row.parentElement && row.parentElement.querySelector(":scope > .annot-note"));
  if (!note) { if (n) n.remove(); return; }
  if (!n) { n = el("p", "annot-note"); row.after(n); }
  n.replaceChildren(el("span", "k", "your note: "), document.createTextNode(note));
}
/** Labels step `d` (a note replaces the step's note; none keeps it).
 * @param {HTMLElement | null | undefined} d @param {string} label @param {string} [note] */
function labelStep(d, label, note) {
  const st = stepOf(d);
  if (!d || !st || !st.callId || d.classList.contains("rolled-back")) return;
  const keep = note === undefined ? st.note : note;
  annotate({ type: "label", sessionId: st.sessionId, callId: st.callId, label, note: keep || undefined }, (text, bad) => {
    st.saved = text; st.savedBad = bad;
    const row = /** @type {HTMLElement | null} */ (d.querySelector(".body .annot")); if (row) savedIn(row)(text, bad);
    // Labelled from the keyboard with the step closed: a failure is said where it shows.
    else if (bad) showNotice("your verdict on step " + st.no + " was " + text);
  });
  showLabel(d, label, keep);
}
/** The verdict row in an open step's body. @param {HTMLElement} body @param {HTMLElement} d @param {StepState} st */
function annotRow(body, d, st) {
  const row = el("div", "annot"); row.setAttribute("role", "group"); row.setAttribute("aria-label", "your verdict on step " + st.no);
  const inert = d.classList.contains("rolled-back");
  row.appendChild(el("span", "k", "your verdict:"));
  for (const [label, text] of VERDICTS) {
    const b = el("button", "label-" + label, text); b.dataset.label = label; b.setAttribute("aria-pressed", String(st.label === label));
    b.onclick = () => labelStep(d, label); /** @type {HTMLButtonElement} */ (b).disabled = inert; row.appendChild(b);
  }
  const note = el("button", "label-note", st.note ? "edit note…" : "with a note…");
  /** @type {HTMLButtonElement} */ (note).disabled = inert;
  note.onclick = () => noteDialog(d, st);
  row.appendChild(note);
  body.appendChild(row);
  if (st.saved) savedIn(row)(st.saved, !!st.savedBad);
  noteLine(row, st.note);
}
/** The verdict and note for a step, chosen among the three, never typed.
 * @param {HTMLElement} d @param {StepState} st */
function noteDialog(d, st) {
  ask("Your verdict on step " + st.no, [
    { name: "label", label: "Verdict", choices: VERDICTS, value: st.label || "incorrect" },
    { name: "note", label: "Note", multi: true, value: st.note },
  ], "Record", (v) => labelStep(d, v.label, v.note));
}
/** @param {Req} r @param {HTMLElement} acts @param {boolean} [fromHistory] */
function rateRow(r, acts, fromHistory) {
  const row = el("span", "rate"); row.setAttribute("role", "group"); row.setAttribute("aria-label", "rate this run");
  row.appendChild(el("span", "k", "rate this run:"));
  for (const rating of ["success", "partial", "failure"]) {
    const b = el("button", "rate-" + rating, rating); b.setAttribute("aria-pressed", "false");
    b.onclick = () => ask("Rate this run: " + rating, [{ name: "note", label: "Note (optional)", multi: true }], "Record", (v) => {
      annotate({ type: "rate", sessionId: r.sessionId || app.session, run: r.runId || (fromHistory ? undefined : r.id), rating, note: v.note || undefined }, savedIn(row));
      for (const o of row.querySelectorAll("button")) o.setAttribute("aria-pressed", String(o === b));
    });
    if (r.rating === rating) b.setAttribute("aria-pressed", "true");
    row.appendChild(b);
  }
  acts.appendChild(row);
}

// ---- steps by keyboard ----
/** The focused step, unless it is rolled back. @returns {HTMLElement | null} */
function focusedStep() {
  const a = document.activeElement; const d = a && a.closest ? /** @type {HTMLElement | null} */ (a.closest(".step")) : null;
  return d && !d.classList.contains("rolled-back") ? d : null;
}
/** The step the keyboard's verdicts apply to: the focused one, else the newest that is not rolled back. */
function currentStep() { const all = thread.querySelectorAll(".step:not(.rolled-back)"); return focusedStep() || /** @type {HTMLElement} */ (all[all.length - 1]); }
/** The step after the focused one (or the first) that matches `sel`, focused. @param {string} sel */
function nextStep(sel) {
  const all = [...thread.querySelectorAll(sel)]; if (!all.length) return;
  const at = focusedStep();
  const next = all.find((d) => at && at.compareDocumentPosition(d) & Node.DOCUMENT_POSITION_FOLLOWING) || all[0];
  const s = /** @type {HTMLElement} */ (next.querySelector("summary")); s.focus(); s.scrollIntoView({ block: "nearest" });
}
/** Moves the keyboard's focus to the next (1) or previous (-1) step. @param {number} by */
function moveStep(by) {
  const all = [...thread.querySelectorAll(".step:not(.rolled-back)")]; if (!all.length) return;
  const at = all.indexOf(/** @type {Element} */ (focusedStep()));
  const next = all[at < 0 ? (by > 0 ? 0 : all.length - 1) : Math.max(0, Math.min(all.length - 1, at + by))];
  const s = /** @type {HTMLElement} */ (next.querySelector("summary")); s.focus(); s.scrollIntoView({ block: "nearest" });
}
/** How far labelling got in this conversation: steps labelled of all, by verdict. */
function labelProgress() {
  const steps = [...thread.querySelectorAll(".step:not(.rolled-back)")].filter((d) => { const st = stepOf(d); return st && st.callId; });
  const box = $("labelled");
  box.hidden = !steps.length; if (!steps.length) return;
  const n = (/** @type {string} */ l) => steps.filter((d) => /** @type {HTMLElement} */ (d).dataset.label === l).length;
  const done = steps.filter((d) => /** @type {HTMLElement} */ (d).dataset.label).length;
  const text = "labelled " + done + " of " + steps.length + " steps · " + n("correct") + " ✓ " + n("incorrect") + " ✗ " + n("unsure") + " ?";
  if (box.dataset.text === text) return;
  box.dataset.text = text; box.replaceChildren(el("span", "", text));
  if (done < steps.length) { const b = el("button", "", "next unlabelled (n)"); b.onclick = () => nextStep(".step:not(.rolled-back):not([data-label])"); box.appendChild(b); }
}
