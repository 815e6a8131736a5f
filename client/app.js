// @ts-check
/**
 * The app: what joins the views and the connection — the live controls (stop, pause,
 * instruct), the composer, the context row, the keyboard, the settings — and the
 * start. Loaded last.
 */
"use strict";
/** The requests running in this view. */
function live() { return [...app.requests.values()].filter((r) => !r.done && !r.history); }
/** Shows what is running: the live controls, Stop, the title, the checkpoints' actions. */
function busy() {
  const running = live();
  // While an answer streams, a screen reader waits for it instead of reading every
  // fragment as it arrives.
  thread.setAttribute("aria-busy", String(running.length > 0));
  app.paused = running.some((r) => r.paused);
  $("stop").hidden = !running.length;
  $("live").hidden = !running.length && !app.session;
  $("live").classList.toggle("idle", !running.length);
  if (!running.length || app.paused) app.pausing = false;
  $("pause").textContent = app.paused ? "Resume" : app.pausing ? "Pausing…" : "Pause";
  button("pause").disabled = !running.length || app.pausing; button("instruct").disabled = !running.length;
  refreshCheckpoints();
  button("send").disabled = !connected();
  if (!running.length) { $("stop").textContent = "Stop"; $("stop").dataset.mode = "stop"; app.runStarted = 0; }
  else if (!app.runStarted) app.runStarted = Date.now();
  if (!document.hidden) document.title = running.length ? (app.paused ? "⏸ picogent" : "… picogent") : "picogent";
  context();
}
/** The model and working folder of the newest run, from its `context` frame. */
/** The context row: the folder, model and tokens of the newest run, and how long it runs. */
function context() {
  const parts = [];
  const wd = app.runContext ? app.runContext.workDir : field("workdir").value.trim();
  parts.push("folder: " + (wd || "server default"));
  if (app.runContext && app.runContext.model) parts.push("model: " + app.runContext.model);
  if (app.lastUsage) parts.push("tokens: " + app.lastUsage.input + " in / " + app.lastUsage.output + " out" + (app.lastUsage.cost ? " · $" + app.lastUsage.cost.toFixed(app.lastUsage.cost < 0.1 ? 4 : 2) : ""));
  if (app.runStarted) parts.push("running " + fmtMs(Date.now() - app.runStarted));
  $("context").textContent = parts.join(" · ");
}
function send() {
  const input = field("input"); const text = input.value.trim();
  if (!text || !connected()) return;
  const id = "msg-" + Date.now().toString(36) + "-" + (++app.counter);
  /** @type {Record<string, unknown>} */
  const frame = { id, content: text, keepAlive: true };
  if (app.session) frame.sessionId = app.session; else app.pendingNew = id;
  const wd = field("workdir").value.trim(); if (wd) frame.workDir = wd;
  const sp = field("system").value.trim(); if (sp) frame.systemPrompt = sp;
  const u = addUser(text); const r = addAssistant(id); r.prompt = text;
  if (live().length > 1) r.box.appendChild(el("div", "queued", "queued: starts when the run before it ends"));
  sendControl(frame);
  // The sidebar shows the session running until its run ends.
  const listed = app.sessions.find((x) => x.id === app.session);
  if (listed) { listed.running = true; renderSessions(); }
  input.value = ""; autosize(); busy();
  u.scrollIntoView({ block: "start" }); updateJump();
}
function autosize() { const i = field("input"); i.style.height = "auto"; i.style.height = Math.min(i.scrollHeight, 192) + "px"; }
function stop() {
  const running = live(); if (!running.length) return;
  const force = $("stop").dataset.mode === "cancel";
  running.forEach((r, n) => {
    // the first is running: stop keeps its work; later ones are queued: cancel them
    if (n === 0 && !force) sendControl(Object.assign({ type: "stop" }, target(r)));
    else sendControl(Object.assign({ type: "cancel" }, target(r)));
  });
  if (!force) {
    $("stop").textContent = "Stopping after this step… cancel now"; $("stop").dataset.mode = "cancel";
    put(running[0], el("div", "notice", "stopping after the current step"));
  }
}
/** Set from Pause until the run holds at its next boundary (the step going on ends first). */
function togglePause() {
  if (app.pausing || !live().length) return;
  let sent = false;
  for (const r of live()) sent = sendControl(Object.assign({ type: app.paused ? "resume" : "pause" }, target(r))) || sent;
  // Waiting for the pause only when it was asked for; a refusal (an error frame) or
  // silence ends the wait.
  if (sent && !app.paused) {
    app.pausing = true;
    clearTimeout(app.pausingTimer);
    app.pausingTimer = setTimeout(() => { app.pausing = false; busy(); }, 15000);
  }
  busy();
}
function instruct() {
  const text = field("instruction").value.trim(); const running = live(); if (!text || !running.length) return;
  const r = running[0];
  sendControl(Object.assign({ type: "instruct", content: text, as: field("instruction-role").value }, target(r)));
  const q = el("div", "notice queued", "instruction queued for the next step: " + text); q.dataset.text = text; put(r, q);
  field("instruction").value = "";
}
$("input").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); send(); } });
$("input").addEventListener("input", autosize);
$("send").addEventListener("click", send);
$("pause").addEventListener("click", togglePause);
$("instruct").addEventListener("click", instruct);
$("instruction").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.isComposing) { e.preventDefault(); instruct(); } });
$("compare").addEventListener("click", () => sendControl({ type: "branches", sessionId: app.session }));
$("stop").addEventListener("click", stop);
$("show-shortcuts").addEventListener("click", () => { $("shortcuts").hidden = !$("shortcuts").hidden; });
/** Whether a key went to a field a person types in. */
/** @param {Event} e */
function typing(e) { const t = /** @type {HTMLElement | null} */ (e.target); return !!t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable); }
/** @type {Record<string, string>} */
const VERDICT_KEYS = { KeyA: "correct", KeyR: "incorrect", KeyU: "unsure" };
function nextFailure() { nextStep(".step.error:not(.rolled-back)"); }
document.addEventListener("keydown", (e) => {
  if (!$("modal").hidden) return;
  // Compare is a dialog: its own keys (Escape closes it), none of the page's.
  if (!$("compare-view").hidden) { if (e.key === "Escape") { e.preventDefault(); closeCompare(); } return; }
  const plain = !e.altKey && !e.ctrlKey && !e.metaKey;
  // Escape in a field leaves the field; elsewhere it closes the shortcuts' help or the
  // comparison, and only then stops.
  if (e.key === "Escape") {
    if (typing(e)) /** @type {HTMLElement} */ (e.target).blur();
    else if (!$("shortcuts").hidden) $("shortcuts").hidden = true;
    else stop();
    return;
  }
  if (e.key === "." && (e.ctrlKey || e.metaKey)) { e.preventDefault(); togglePause(); return; }
  if (typing(e)) return;
  // Alt+P pause/resume; Alt+A/R/U label the focused step (else the newest); without
  // Alt, j/k move between steps and a/r/u label the focused one; ? lists them all.
  if (e.altKey && !e.ctrlKey && !e.metaKey) {
    if (e.code === "KeyP") { e.preventDefault(); togglePause(); }
    else if (VERDICT_KEYS[e.code]) { e.preventDefault(); labelStep(currentStep(), VERDICT_KEYS[e.code]); }
    return;
  }
  if (!plain) return;
  if (e.key === "j" || e.key === "k") { e.preventDefault(); moveStep(e.key === "j" ? 1 : -1); }
  else if (VERDICT_KEYS[e.code] && focusedStep()) { e.preventDefault(); labelStep(focusedStep(), VERDICT_KEYS[e.code]); }
  else if (e.key === "f") { e.preventDefault(); nextFailure(); }
  else if (e.key === "n") { e.preventDefault(); nextStep(".step:not(.rolled-back):not([data-label])"); }
  else if (e.key === "?") { e.preventDefault(); $("shortcuts").hidden = !$("shortcuts").hidden; }
  else if (e.key === "/") { e.preventDefault(); if (!sidebarOpen()) setSidebar(true); $("session-search").focus(); }
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) busy(); });
function notify(title, body) {
  if (!document.hidden || !field("notify").checked || typeof Notification === "undefined") return;
  if (Notification.permission === "granted") new Notification(title, { body });
}
$("notify").addEventListener("change", () => { const on = field("notify").checked; if (on && typeof Notification !== "undefined") Notification.requestPermission(); store.set("notify", on); });
field("notify").checked = !!store.get("notify", false);
$("toggle-settings").addEventListener("click", (e) => {
  const s = $("settings"); s.hidden = !s.hidden; $("toggle-settings").setAttribute("aria-expanded", String(!s.hidden));
});
// The token stays in this tab (sessionStorage) unless "remember" is ticked.
field("remember").checked = store.get("token", null) !== null;
field("token").value = store.get("token", null) ?? (sessionStorage.getItem("picogent.token") || "");
function saveToken() {
  try { sessionStorage.setItem("picogent.token", field("token").value); } catch {}
  if (field("remember").checked) store.set("token", field("token").value); else store.del("token");
}
$("token").addEventListener("change", () => { saveToken(); reconnectNow(); });
// A link with ?token=… (one an operator hands out) admits the page; the token then
// leaves the address bar, so it is not kept in the history or shared with the URL.
{
  const q = new URLSearchParams(location.search), t = q.get("token");
  if (t !== null) {
    field("token").value = t; saveToken(); q.delete("token");
    const rest = q.toString();
    try { history.replaceState(null, "", location.pathname + (rest ? "?" + rest : "") + location.hash); } catch {}
  }
}
$("retry").addEventListener("click", () => { app.attempt = 0; connect(); });
$("remember").addEventListener("change", saveToken);
field("server").placeholder = defaultServer();
for (const k of ["server", "workdir", "system"]) {
  field(k).value = store.get(k, "");
  $(k).addEventListener("change", () => { store.set(k, field(k).value); if (k === "server") reconnectNow(); context(); });
}
if (!location.protocol.startsWith("http") && !field("server").value) $("settings").hidden = false;
// A session named in the address (a link, a bookmark) wins over the one last open here.
{ const named = sessionInAddress(); if (named !== null) app.session = named; }
setSession(app.session, null);
if (app.session) clearView("Loading session " + app.session + "…");
connect();
$("input").focus();
/** Enables the checkpoints' actions where the server takes them: a running request's
 * while it is paused, a finished request's once nothing runs. */
function refreshCheckpoints() {
  const running = live().length > 0;
  for (const b of thread.querySelectorAll(".marker button, .after-step button")) {
    const box = /** @type {HTMLElement | null} */ (b.closest(".msg.assistant"));
    const r = box && box.dataset.id ? app.requests.get(box.dataset.id) : undefined;
    const open = box && box.dataset.state === "done" ? !running : !!(r && r.paused && !r.done);
    /** @type {HTMLButtonElement} */ (b).disabled = !open || b.closest(".rolled-back") !== null;
  }
}
/** @param {string} id @returns {HTMLButtonElement} */
function button(id) { return /** @type {HTMLButtonElement} */ ($(id)); }
