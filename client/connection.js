// @ts-check
/**
 * The connection to picogent's chat WebSocket and its states: connecting, open (once
 * the server's first frame admits the page), closed — retried with backoff, except a
 * refused token or origin, which waits for a person. Frames from the server go to
 * `onFrame`; frames to it go through `sendControl`.
 */
"use strict";

function defaultServer() { return location.protocol.startsWith("http") ? (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws" : "ws://127.0.0.1:3100/ws"; }
function serverUrl() {
  const url = field("server").value.trim() || defaultServer();
  const token = field("token").value;
  return token ? url + (url.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(token) : url;
}
/** @param {"connecting" | "open" | "closed"} state @param {string} text @param {string} [detail] */
function setStatus(state, text, detail) { const s = $("status"); s.dataset.state = state; s.textContent = text; $("status-detail").textContent = detail || ""; }
/** Whether frames can be sent: open and admitted by the server. */
function connected() { return !!app.ws && app.ws.readyState === 1 && app.admitted; }
/** Sends a frame if the connection is open. @param {Record<string, unknown>} frame */
function sendControl(frame) { if (app.ws && app.ws.readyState === 1) { app.ws.send(JSON.stringify(frame)); return true; } return false; }
/** Connects now: a pending retry is dropped (one connection at a time). */
function connect() {
  clearTimeout(app.retryTimer); clearInterval(app.retryTick); app.retryTimer = app.retryTick = 0;
  $("retry").hidden = true;
  setStatus("connecting", app.attempt ? "reconnecting · attempt " + (app.attempt + 1) : "connecting…", app.refusal);
  app.admitted = false;
  /** @type {WebSocket} */
  let me;
  try { me = app.ws = new WebSocket(serverUrl()); } catch (e) { setStatus("closed", "bad server URL", String(e instanceof Error ? e.message : e)); return; }
  me.onopen = () => {
    app.everOpen = true;
    app.pausing = false;
    // Connected only once the server answers: a refused handshake is accepted and
    // closed at once (4001/4003, with its reason) without a frame.
    refreshSessions();
    if (app.session) {
      const going = [...app.requests.values()].filter((r) => !r.done);
      if (going.length && going.every((r) => r.runId)) for (const r of going) sendControl({ type: "subscribe", runId: r.runId, after: r.seq });
      else if (going.length || !thread.querySelector(".msg")) sendControl({ type: "history", sessionId: app.session });
    }
    busy();
  };
  me.onmessage = (m) => {
    if (me !== app.ws) return;
    if (!app.admitted) { app.admitted = true; app.attempt = 0; app.refusal = ""; setStatus("open", "connected"); busy(); }
    /** @type {Frame} */
    let f;
    try { f = JSON.parse(m.data); } catch (e) { console.error("not a frame:", e); return; }
    try { onFrame(f); } catch (e) { console.error(e); }
  };
  me.onclose = (ev) => {
    if (me !== app.ws) return;
    app.admitted = false;
    // A refused token or origin stays refused until something changes: no retries,
    // the reason, and a way to try again (a new token reconnects by itself).
    if (ev.code === 4001 || ev.code === 4003) {
      app.refusal = ev.reason || (ev.code === 4001 ? "token required" : "origin not allowed");
      setStatus("closed", ev.code === 4001 ? "refused: wrong or missing token" : "refused: this page's address is not allowed", app.refusal);
      $("retry").hidden = false;
      if (ev.code === 4001) { $("settings").hidden = false; $("toggle-settings").setAttribute("aria-expanded", "true"); $("token").focus(); }
      busy(); return;
    }
    if (ev.code >= 4000 && ev.reason) app.refusal = ev.reason;
    else if (app.attempt === 0 && !app.everOpen) app.refusal = location.protocol === "file:" ? "refused? a page opened from disk needs PICOGENT_ALLOWED_ORIGINS=null on the server" : "";
    app.attempt++;
    const wait = Math.min(1000 * 2 ** (app.attempt - 1), 15000);
    let left = Math.round(wait / 1000);
    const tick = () => setStatus("closed", "disconnected · attempt " + (app.attempt + 1) + ", next in " + left + " s", app.refusal);
    tick(); const iv = setInterval(() => { left--; if (left > 0) tick(); }, 1000);
    app.retryTimer = setTimeout(() => { clearInterval(iv); connect(); }, wait); app.retryTick = iv;
    busy();
  };
}
/** After a settings change: close an open connection (its onclose retries), or, while
 * waiting to retry, retry now. */
function reconnectNow() { if (app.ws && app.ws.readyState <= 1) app.ws.close(); else connect(); }
