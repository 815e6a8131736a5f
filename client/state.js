// @ts-check
/**
 * The page's state, in one object (`app`), and the small helpers every view uses. The
 * page's scripts are classic scripts loaded in order (state, markdown, steps, verdicts,
 * stream, thread, sessions, dialogs, connection, app): the page also opens from disk, where modules do
 * not load. Nothing else keeps state between events; a step's own state is in
 * `app.steps`, keyed by its element, never on the element.
 *
 * @typedef {import("./types/frames").Outgoing} Frame
 * @typedef {import("./types/frames").HistoryItem} HistoryItem
 * @typedef {import("./types/frames").SessionInfo} SessionInfo
 * @typedef {import("./types/frames").Usage} Usage
 *
 * A request shown in this view (live, replayed, or from a history).
 * @typedef {{
 *   id: string, runId: string | null, seq: number, box: HTMLElement,
 *   seg: TextSeg | null, steps: Map<string, HTMLElement>, last: HTMLElement | null,
 *   done: boolean, text: string, history: boolean, prompt?: string, paused?: boolean,
 *   failed?: string, gap?: boolean, rating?: string, usage?: {input: number, output: number, cost: number},
 *   segFrom?: number, sessionId?: string, hasOutput?: boolean,
 * }} Req
 *
 * A step's state (its element is the key).
 * @typedef {{
 *   tool: string, callId: string | null, sessionId: string, args: unknown, started: number,
 *   live: boolean, history: boolean, no: number, r: Req,
 *   output: Extract<Frame, {type: "tool_output"}> | null, liveText: string,
 *   checkpoint: number | null, label: string, note: string, saved?: string, savedBad?: boolean,
 * }} StepState
 */
"use strict";

/** @param {string} id @returns {HTMLElement} */
const $ = (id) => /** @type {HTMLElement} */ (document.getElementById(id));
/** An input, textarea or select by id. @param {string} id @returns {HTMLInputElement} */
const field = (id) => /** @type {HTMLInputElement} */ (document.getElementById(id));
/** What this browser remembers, under `picogent.`; never throws (private modes). */
const store = {
  /** @template T @param {string} k @param {T} d @returns {T} */
  get: (k, d) => { try { const v = localStorage.getItem("picogent." + k); return v === null ? d : JSON.parse(v); } catch { return d; } },
  /** @param {string} k @param {unknown} v */
  set: (k, v) => { try { localStorage.setItem("picogent." + k, JSON.stringify(v)); } catch {} },
  /** @param {string} k */
  del: (k) => { try { localStorage.removeItem("picogent." + k); } catch {} },
};
/**
 * @param {string} tag
 * @param {string} [cls]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

const app = {
  /** The open session's id ("": a new one, named by the first request's frames). */
  session: /** @type {string} */ (store.get("session", "")),
  /** The id of a request sent without a session: its frames name the new one. */
  pendingNew: /** @type {string | null} */ (null),
  /** Numbers this page's request and question ids. */
  counter: 0,
  /** Requests shown in this view, by request id. */
  requests: /** @type {Map<string, Req>} */ (new Map()),
  /** The number the next step shown gets (one numbering for the conversation). */
  stepNo: 0,
  /** Each step's state, by its element. */
  steps: /** @type {WeakMap<Element, StepState>} */ (new WeakMap()),
  /** A running request is paused; Pause was asked for and the run has not held yet. */
  paused: false, pausing: false, pausingTimer: 0,
  /** The newest run's totals, model and working folder, and when the run began. */
  lastUsage: /** @type {{input: number, output: number, cost: number} | null} */ (null),
  runContext: /** @type {{model?: string, workDir?: string} | null} */ (null),
  runStarted: 0,
  /** Which `history` answer is being shown (an older one still rendering stops), and
   * where it puts its messages (null: at the end of the thread). */
  historyGen: 0,
  historyInto: /** @type {HTMLElement | null} */ (null),
  /** Streaming text segments waiting for their next frame. */
  pending: /** @type {Set<TextSeg>} */ (new Set()),
  scheduled: false,
  /** The sessions list: the page shown, the search, whether more can be asked for. */
  sessions: /** @type {SessionInfo[]} */ ([]),
  sessionQuery: "",
  sessionsMore: false,
  /** The newest first-page question's number, and the question for more, if one waits. */
  sessionsAsked: 0,
  sessionsMoreAsked: "",
  /** The newest first page is not answered yet; Enter in the search waits for it. */
  sessionsWaiting: false,
  openFirstMatch: false,
  /** Where the keyboard was before a dialog opened. */
  beforeModal: /** @type {Element | null} */ (null),
  /** Where the keyboard was before Compare opened. */
  beforeCompare: /** @type {Element | null} */ (null),
  /** A search typed and not yet asked (asked 150 ms after the last key). */
  searchTimer: 0,
  /** Questions waiting for answers, by frame id: labels and ratings (the element that
   * says "saving…"), rollback previews (the element the files go in). */
  annotating: /** @type {Map<string, (text: string, bad: boolean) => void>} */ (new Map()),
  previews: /** @type {Map<string, HTMLElement>} */ (new Map()),
  /** The connection: its socket, whether the server admitted it, retries. */
  ws: /** @type {WebSocket | null} */ (null),
  admitted: false,
  attempt: 0,
  refusal: "",
  retryTimer: 0,
  retryTick: 0,
  everOpen: false,
};
/** The next id for a frame this page sends. @param {string} prefix */
function nextId(prefix) { return prefix + "-" + (++app.counter); }
/** A step's state. @param {Element | null | undefined} d @returns {StepState | undefined} */
function stepOf(d) { return d ? app.steps.get(d) : undefined; }
