// @ts-check
/**
 * The sessions sidebar: the server's sessions a page at a time (newest first, by day),
 * searched on the server, opened, renamed and deleted; the open session in the
 * address (`#session=ID`), so a link or a bookmark opens it; a drawer on a phone.
 */
"use strict";

/** The open session: its id in the address and the header. @param {string} id @param {string | null} firstPrompt */
function setSession(id, firstPrompt) {
  app.session = id || ""; store.set("session", app.session);
  $("session-id").textContent = app.session ? "session " + app.session : "new session";
  if (app.session && firstPrompt && !app.sessions.some((s) => s.id === app.session)) {
    app.sessions.unshift({ id: app.session, title: firstPrompt, modified: Date.now(), running: true });
  }
  const hash = app.session ? "#session=" + encodeURIComponent(app.session) : "";
  if (location.hash !== hash && location.protocol !== "about:") {
    try { history.replaceState(null, "", location.pathname + location.search + hash); } catch {}
  }
  renderSessions();
}
/** The session the address names (`#session=ID`), if any. */
function sessionInAddress() {
  const m = /^#session=([^&]+)/.exec(location.hash);
  if (!m) return null;
  try { return decodeURIComponent(m[1]); } catch { return null; }
}
/** When a session last changed, with the time (today: the time alone). @param {number} ms */
function when(ms) {
  const d = new Date(ms), now = new Date();
  const time = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return d.toDateString() === now.toDateString() ? time : d.toLocaleDateString() + " " + time;
}
/** A session's title: the name a person gave it, else its first prompt as typed. @param {SessionInfo} s */
function sessionTitle(s) { return s.name || s.title || "(untitled)"; }
/** The heading a session is listed under: Today, Yesterday, or its date. @param {number} ms */
function dayOf(ms) {
  const d = new Date(ms), y = new Date(); y.setDate(y.getDate() - 1);
  if (d.toDateString() === new Date().toDateString()) return "Today";
  if (d.toDateString() === y.toDateString()) return "Yesterday";
  return d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
}

// ---- asking the server ----
/** Sessions in one page of the list. */
const SESSIONS_PAGE = 100;
/** Asks for the list's first page again (after a search, a run's end, a rename). */
function refreshSessions() {
  clearTimeout(app.searchTimer); app.searchTimer = 0;
  app.sessionQuery = field("session-search").value.trim();
  const id = nextId("ss"); app.sessionsAsked = app.counter; app.sessionsMoreAsked = ""; app.sessionsWaiting = true;
  const frame = { type: "sessions", id, limit: SESSIONS_PAGE, query: app.sessionQuery || undefined };
  sendControl(frame);
}
/** Asks for the page after the last session listed. */
function moreSessions() {
  const last = app.sessions[app.sessions.length - 1];
  if (!app.sessionsMore || !last || app.sessionsMoreAsked) return;
  const id = nextId("sm"); app.sessionsMoreAsked = id;
  sendControl({ type: "sessions", id, limit: SESSIONS_PAGE, query: app.sessionQuery || undefined, before: { modified: last.modified, id: last.id } });
}
/** A `sessions` answer: the first page replaces the list, a later one extends it;
 * answers to questions asked before the newest are dropped.
 * @param {Extract<Frame, {type: "sessions"}>} f */
function showSessions(f) {
  const id = String(f.id || "");
  if (id && id === app.sessionsMoreAsked) {
    app.sessionsMoreAsked = "";
    const have = new Set(app.sessions.map((s) => s.id));
    app.sessions.push(...f.content.filter((s) => !have.has(s.id)));
  } else if (!id || id === "ss-" + app.sessionsAsked) {
    app.sessions = f.content; app.sessionsWaiting = false;
  } else return;
  app.sessionsMore = !!f.more;
  renderSessions();
  // Enter was pressed in the search before this answer: its first match opens.
  if (app.openFirstMatch && !app.sessionsWaiting) {
    app.openFirstMatch = false;
    /** @type {HTMLElement | null} */ ($("session-list").querySelector(".item .open"))?.click();
  }
}

// ---- the list ----
function renderSessions() {
  const list = $("session-list");
  // Not under a person typing a new name.
  if (list.querySelector("input")) return;
  const focused = document.activeElement && list.contains(document.activeElement) ? document.activeElement : null;
  const refocus = focused && { id: /** @type {HTMLElement | null} */ (focused.closest(".item"))?.dataset.id, more: focused.classList.contains("more") };
  list.replaceChildren();
  const all = [...app.sessions];
  // The open session before the server lists it (its file may not exist yet).
  if (app.session && !app.sessionQuery && !all.some((s) => s.id === app.session)) {
    all.unshift(/** @type {SessionInfo} */ ({ id: app.session, title: app.session, modified: Date.now(), running: false, unlisted: true }));
  }
  let day = "";
  for (const s of all) {
    const d = dayOf(s.modified);
    if (d !== day) { day = d; list.appendChild(el("li", "day", d)); }
    list.appendChild(sessionRow(s));
  }
  if (!all.length) list.appendChild(el("li", "none", app.sessionQuery ? "No session's title or first prompt holds “" + app.sessionQuery + "”." : "No sessions yet: your first message starts one."));
  if (app.sessionsMore) {
    const li = el("li", "more-row"), b = el("button", "more", "Older sessions…");
    b.onclick = () => { b.textContent = "Loading…"; moreSessions(); };
    li.appendChild(b); list.appendChild(li);
  }
  if (refocus && refocus.more) { const items = list.querySelectorAll(".item .open"); /** @type {HTMLElement | undefined} */ (items[items.length - 1])?.focus(); }
  else if (refocus && refocus.id) /** @type {HTMLElement | null} */ (list.querySelector(`.item[data-id="${CSS.escape(refocus.id)}"] .open`))?.focus();
}
/** @param {SessionInfo & {unlisted?: boolean}} s */
function sessionRow(s) {
  const li = el("li", "item"), title = sessionTitle(s);
  li.dataset.id = s.id;
  if (s.id === app.session) li.setAttribute("aria-current", "true");
  const open = el("button", "open"); open.title = title + "\n" + s.id;
  open.append(el("span", "t" + (s.running ? " running" : ""), title), el("span", "d", when(s.modified) + (s.running ? " · running" : "")));
  open.onclick = () => { closeDrawer(); openSession(s.id); field("input").focus(); };
  const ren = el("button", "", "✎"); ren.title = "Rename"; ren.setAttribute("aria-label", "Rename " + title);
  ren.onclick = () => renameRow(li, s, title);
  const del = el("button", "", "✕"); del.title = "Delete"; del.setAttribute("aria-label", "Delete " + title);
  /** @type {HTMLButtonElement} */ (del).disabled = !!s.running;
  del.onclick = () => {
    if (!del.classList.contains("really")) { del.classList.add("really"); del.textContent = "Delete?"; del.setAttribute("aria-label", "Really delete " + title + "?"); return; }
    sendControl({ type: "delete", sessionId: s.id }); if (s.id === app.session) openSession("");
  };
  del.onblur = () => { del.classList.remove("really"); del.textContent = "✕"; del.setAttribute("aria-label", "Delete " + title); };
  const acts = el("span", "acts"); if (!s.unlisted) acts.append(ren, del); li.append(open, acts);
  return li;
}
/** Renames in place: Enter or leaving the field keeps the name, Escape drops it. The
 * name is stored in the session file, so every tab and pi see it.
 * @param {HTMLElement} li @param {SessionInfo} s @param {string} title */
function renameRow(li, s, title) {
  const inp = /** @type {HTMLInputElement} */ (el("input")); inp.type = "text"; inp.maxLength = 200; inp.value = s.name || title;
  inp.setAttribute("aria-label", "New name for " + title);
  li.replaceChildren(inp); inp.focus(); inp.select();
  let over = false;
  const finish = (/** @type {boolean} */ keep) => {
    if (over) return; over = true;
    const name = inp.value.trim();
    // Shown once the server stored it (its answer asks for the list again).
    if (keep && name !== (s.name || title)) sendControl({ type: "rename", sessionId: s.id, name });
    li.replaceChildren(); renderSessions();
    /** @type {HTMLElement | null} */ ($("session-list").querySelector(`.item[data-id="${CSS.escape(s.id)}"] .open`))?.focus();
  };
  inp.onkeydown = (e) => {
    if (e.key === "Enter" && !e.isComposing) { e.preventDefault(); finish(true); }
    else if (e.key === "Escape") { e.preventDefault(); e.stopPropagation(); finish(false); }
  };
  inp.onblur = () => finish(true);
}
/** A run in session `id` ended: not running any more, here at once. @param {string} id */
function sessionEnded(id) {
  const s = app.sessions.find((x) => x.id === id);
  if (s && s.running) { s.running = false; renderSessions(); }
  refreshSessions();
}
/** Opens a session ("" a new one). @param {string} id */
function openSession(id) {
  setSession(id, null); app.runContext = null; app.lastUsage = null;
  if (id) { clearView("Loading session " + id + "…"); sendControl({ type: "history", sessionId: id }); }
  else clearView();
}
$("session-search").addEventListener("input", () => {
  clearTimeout(app.searchTimer);
  app.searchTimer = setTimeout(refreshSessions, 150);
});
$("session-search").addEventListener("keydown", (e) => {
  // Enter opens the first match of what was typed (once the server answered it); the
  // arrow goes down the list.
  const first = /** @type {HTMLElement | null} */ ($("session-list").querySelector(".item .open"));
  if (e.key === "Enter" && (app.searchTimer || app.sessionsWaiting)) { e.preventDefault(); app.openFirstMatch = true; if (app.searchTimer) refreshSessions(); }
  else if (e.key === "Enter" && first) { e.preventDefault(); first.click(); }
  else if (e.key === "ArrowDown" && first) { e.preventDefault(); first.focus(); }
});
$("session-list").addEventListener("keydown", (e) => {
  const t = /** @type {HTMLElement} */ (e.target);
  if (e.key !== "ArrowDown" && e.key !== "ArrowUp" || !t.classList.contains("open")) return;
  const all = /** @type {HTMLElement[]} */ ([...$("session-list").querySelectorAll(".item .open, .more")]);
  const at = all.indexOf(t) + (e.key === "ArrowDown" ? 1 : -1);
  e.preventDefault();
  if (at < 0) $("session-search").focus(); else all[Math.min(at, all.length - 1)].focus();
});
// Scrolled near the end of the list: the next page.
$("session-list").addEventListener("scroll", () => {
  const l = $("session-list");
  if (l.scrollTop + l.clientHeight > l.scrollHeight - 200) moreSessions();
});
$("new-session").addEventListener("click", () => { closeDrawer(); openSession(""); field("input").focus(); });
// A link or the Back button naming another session opens it.
window.addEventListener("hashchange", () => { const id = sessionInAddress(); if (id !== null && id !== app.session) openSession(id); });

// ---- beside the conversation; on a phone a drawer over it ----
const phone = () => matchMedia("(max-width: 760px)").matches;
function sidebarOpen() { return phone() ? document.body.classList.contains("side-open") : !document.body.classList.contains("side-closed"); }
/** @param {boolean} open */
function setSidebar(open) {
  if (phone()) document.body.classList.toggle("side-open", open);
  else { document.body.classList.toggle("side-closed", !open); store.set("sidebar", open); }
  $("toggle-sidebar").setAttribute("aria-expanded", String(open));
  if (open && phone()) $("session-search").focus();
}
function closeDrawer() { if (phone() && sidebarOpen()) { setSidebar(false); } }
$("toggle-sidebar").addEventListener("click", () => setSidebar(!sidebarOpen()));
$("close-sidebar").addEventListener("click", () => { setSidebar(false); $("toggle-sidebar").focus(); });
// Escape leaves the list (never stops a run from here): a phone's drawer closes.
$("sidebar").addEventListener("keydown", (e) => {
  if (e.key !== "Escape" || e.defaultPrevented) return;
  e.stopPropagation();
  if (phone()) { setSidebar(false); $("toggle-sidebar").focus(); } else $("input").focus();
});
/** @type {HTMLElement} */ (document.querySelector(".pane")).addEventListener("pointerdown", () => closeDrawer());
document.body.classList.toggle("side-closed", !store.get("sidebar", true));
$("toggle-sidebar").setAttribute("aria-expanded", String(sidebarOpen()));
