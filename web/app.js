// Chorus reference web client: plain JavaScript, no build step, no dependencies.
//
// How it talks to the server (see README.md and openapi.yaml):
// - A user is picked with POST /v1/dev/token (development mode only), naming this browser's
//   device id for that user (kept in localStorage), so reads made here reach the user's other
//   devices through their /v1/sync; the token stays in sessionStorage for this tab.
// - The chat list is GET /v1/me/groups?order=recent (latest activity first, every page read),
//   with each group's last-message preview and unread count, and the total unread count.
// - Two long-poll loops run while signed in: GET /v1/sync (groups that received messages, were
//   read on another device, joined or left, with their current state and the total unread)
//   and GET /v1/receipts (read counts of my messages changed). Each starts without a cursor,
//   reads the current state, then polls with the cursor it was given.
// - The open group's log entries are kept in a Map by msg_id (deduplication); new ones are
//   pulled with after_msg_id = the highest shown, and the highest shown is acked.
// - Entries have a kind (openapi.yaml, "Message kinds"): messages; recalled or deleted ones,
//   shown as a grey line in their place; change entries (recall, edit, delete), never shown
//   but applied to the stored copy of their target; system lines (members joined, left,
//   removed; the group renamed), shown as centred lines. A change entry carries its target's
//   current state, so it is kept even when the target is not loaded yet.
// - The composer turns `@id` of a member into `mentions` (and the owner's `@all` into
//   mention_all), and can reply to a message (reply_to_msg_id).
// - Members: anyone in a group lists them (GET /v1/groups/{g}/members, paged); the owner adds
//   (POST …/members) and removes (DELETE …/members/{user}); others leave (DELETE their own id).
//   User ids typed into the client are checked against the spec's rule before sending.
// - Narrow screens (see app.css) show either the list or the open chat, by #main's data-view;
//   opening a chat there adds a history entry, so the phone's back button returns to the list.
// - User content only ever reaches the page through textContent, never innerHTML.
'use strict';

const POLL_TIMEOUT_S = 25;
const POLL_HTTP_TIMEOUT_MS = (POLL_TIMEOUT_S + 15) * 1000; // above timeout_s, as the spec asks
const REQUEST_TIMEOUT_MS = 15000;
const HISTORY_PAGE = 50;
const PULL_PAGE = 200;
const SEND_ATTEMPTS = 6;
const STORAGE_KEY = 'chorus.session';
const DEVICE_KEY_PREFIX = 'chorus.device.'; // + user id: this browser's device id for the user
const PREVIEW_CHARS = 120; // what the server puts in last_message.preview
const MEMBER_PAGE = 200;
const MAX_IDS_PER_REQUEST = 1000;
const RUN_GAP_MS = 5 * 60 * 1000; // one sender's messages this close together share one header
const NARROW = window.matchMedia('(max-width: 700px)'); // the breakpoint in app.css
const TITLE = 'Chorus';
const MAX_MENTIONS = 50; // SendMessageRequest.mentions in openapi.yaml
const MEMBER_ID_PAGES = 5; // the composer recognises @mentions among this many pages of members
const NAMES_IN_LINE = 10; // a system line names this many users, then "and N others"

// Entry kinds (EntryKind in openapi.yaml).
const CHANGE_KINDS = new Set(['recall', 'edit', 'delete']);
const RETRACTED_KINDS = new Set(['recalled', 'deleted']);
const SYSTEM_KINDS = new Set(['member_joined', 'member_left', 'member_removed', 'group_renamed']);
const MEMBERSHIP_KINDS = new Set(['member_joined', 'member_left', 'member_removed']);

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- state

let session = null; // { user, token, alive, stop: AbortController, polls, acks, sends: group_id -> Promise }
const groups = new Map(); // group_id -> MyGroup (name, cursors, unread_count, last_message, …)
let totalUnread = 0; // over all my groups: the server's total_unread, kept current by my acks
const receipts = new Map(); // "group/msg" -> { read_count, unread_count, delivered_count }
// The open group: { id, ownerId, entries: Map(msg_id -> entry as now), nodes: Map(msg_id -> li),
// changes: Map(msg_id -> state from a change entry whose target is not loaded), memberIds, … }
let open = null;
let replyingTo = null; // the message the composer replies to: { groupId, msgId, senderId, preview }
let chatEntry = false; // a history entry was pushed for the open chat (narrow screens only)
let chatEntryDropping = false; // history.back() was called to drop it; its popstate is ours
let roster = null; // the members dialog: { groupId, ownerId, members, nextCursor }
const loops = { sync: 'connecting', receipts: 'connecting' };

// ---------------------------------------------------------------- HTTP

class HttpError extends Error {
  constructor(status, code, message, retryAfter = 0) {
    super(message);
    this.status = status; // 0: network error or timeout
    this.code = code;
    this.retryAfter = retryAfter; // seconds, from Retry-After
  }
}

// Network errors, 429 (too many waiting polls), 503 (database away) and 5xx are worth retrying.
const retriable = (e) => e instanceof HttpError && (e.status === 0 || e.status === 429 || e.status >= 500);

async function api(method, path, { body, timeoutMs = REQUEST_TIMEOUT_MS, auth = true, kick } = {}) {
  const sess = session;
  const ctrl = new AbortController();
  const timer = setTimeout(() => ctrl.abort(), timeoutMs);
  const stop = () => ctrl.abort();
  if (auth) sess?.stop.signal.addEventListener('abort', stop);
  kick?.addEventListener('abort', stop);
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (auth && sess) headers.Authorization = `Bearer ${sess.token}`;
  let res, text;
  try {
    res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: ctrl.signal,
      cache: 'no-store',
    });
    text = await res.text();
  } catch {
    if (kick?.aborted) throw new HttpError(0, 'kicked', 'Poll restarted.');
    throw new HttpError(0, 'network', 'Cannot reach the server.');
  } finally {
    clearTimeout(timer);
    if (auth) sess?.stop.signal.removeEventListener('abort', stop);
    kick?.removeEventListener('abort', stop);
  }
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (res.ok) return data;
  const err = (data && data.error) || {};
  const e = new HttpError(res.status, err.code || `http_${res.status}`,
    err.message || `${res.status} ${res.statusText}`, Number(res.headers.get('Retry-After')) || 0);
  if (res.status === 401 && auth && sess && sess === session) {
    signOut(e.code === 'device_signed_out'
      ? 'This browser was signed out from another of your devices. Pick a user again to sign it back in.'
      : 'Your session is no longer valid (the token expired or the server changed). Pick a user again.');
  }
  throw e;
}

// Exponential backoff with jitter, or what the server asked for in Retry-After.
function backoff(e, attempt) {
  if (e.retryAfter) return e.retryAfter * 1000;
  return Math.min(30000, 500 * 2 ** attempt) * (0.75 + Math.random() / 2);
}

// A sleep that ends early when the user signs out.
function sleep(ms, sess) {
  return new Promise((resolve) => {
    const t = setTimeout(done, ms);
    function done() { clearTimeout(t); sess.stop.signal.removeEventListener('abort', done); resolve(); }
    sess.stop.signal.addEventListener('abort', done);
  });
}

async function withRetry(fn, sess, maxAttempts = 8) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (!sess.alive || !retriable(e) || attempt + 1 >= maxAttempts) throw e;
      await sleep(backoff(e, attempt), sess);
    }
  }
}

function newClientMsgId() {
  if (crypto.randomUUID) return crypto.randomUUID(); // secure contexts only (https, localhost)
  const b = crypto.getRandomValues(new Uint8Array(16));
  return 'c-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

// This browser's device id for a user, chosen once and kept. Device ids are global (the first
// user to use one owns it), hence one per user. Without storage: the user's default device.
function deviceIdFor(user) {
  try {
    const key = DEVICE_KEY_PREFIX + user;
    let id = localStorage.getItem(key);
    if (!id) {
      id = 'web-' + newClientMsgId();
      localStorage.setItem(key, id);
    }
    return id;
  } catch {
    return null;
  }
}

// User ids typed by a person, separated by commas and/or spaces, each checked against the
// spec's rule (UserId in openapi.yaml) before anything is sent. Gives { ids } or { error },
// the error naming every id that is wrong and why.
const USER_ID_CHAR = /[A-Za-z0-9._@:-]/;
const USER_ID_RULE = '1-64 characters from A-Z a-z 0-9 . _ @ : -';
function parseUserIds(text) {
  const ids = [...new Set(text.split(/[\s,]+/).filter(Boolean))];
  const bad = ids.map(whatIsWrongWithId).filter(Boolean);
  if (bad.length === 1) return { error: `Not a valid user id: ${bad[0]}. A user id is ${USER_ID_RULE}.` };
  if (bad.length > 1) return { error: `Not valid user ids: ${bad.join('; ')}. A user id is ${USER_ID_RULE}.` };
  if (ids.length > MAX_IDS_PER_REQUEST) {
    return { error: `At most ${MAX_IDS_PER_REQUEST} user ids at a time (${ids.length} given).` };
  }
  return { ids };
}

// null for a good id, else the id (shortened if very long) and what is wrong with it.
function whatIsWrongWithId(id) {
  const chars = Array.from(id);
  const problems = [];
  const wrong = [...new Set(chars.filter((c) => !USER_ID_CHAR.test(c)))];
  if (wrong.length) problems.push(`${wrong.map(showChar).join(' ')} not allowed`);
  if (chars.length > 64) problems.push(`${chars.length} characters, at most 64`);
  if (!problems.length) return null;
  const shown = chars.length > 40 ? chars.slice(0, 40).join('') + '…' : id;
  return `“${shown}” (${problems.join(', ')})`;
}

// Invisible characters (a zero-width space pasted with an id) are named by code point.
function showChar(c) {
  if (/[\p{C}\p{Z}]/u.test(c)) return 'U+' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
  return `“${c}”`;
}

// ---------------------------------------------------------------- small DOM helpers

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'testid') node.dataset.testid = v;
    else if (k === 'text') node.textContent = v;
    else if (k in node) node[k] = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

// A user as the signed-in user reads it: "you" for themselves, capitalised to start a line.
function who(userId, start = false) {
  if (!session || userId !== session.user) return userId;
  return start ? 'You' : 'you';
}

function showError(node, message) {
  node.textContent = message || '';
  node.hidden = !message;
}

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dayTimeFmt = new Intl.DateTimeFormat(undefined, {
  month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
});
// `iso` as the time of day when it is today, else with `olderFmt(date)`; '' if unreadable.
function formatWhen(iso, olderFmt) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return (d.toDateString() === new Date().toDateString() ? timeFmt : olderFmt(d)).format(d);
}

// A message's time: the day and time before today.
function formatTime(iso) {
  return formatWhen(iso, () => dayTimeFmt);
}

// A chat's time in the chat list: the date before today (with the year when it is not this
// one).
const chatDayFmt = new Intl.DateTimeFormat(undefined, { month: 'short', day: 'numeric' });
const chatDateFmt = new Intl.DateTimeFormat(undefined, { year: 'numeric', month: 'short', day: 'numeric' });
function formatChatTime(iso) {
  const thisYear = new Date().getFullYear();
  return formatWhen(iso, (d) => (d.getFullYear() === thisYear ? chatDayFmt : chatDateFmt));
}

function setLoop(name, state) {
  loops[name] = state;
  const s = $('status');
  const states = Object.values(loops);
  const overall = states.includes('offline') ? 'offline' : states.includes('connecting') ? 'connecting' : 'live';
  s.dataset.state = overall;
  s.textContent = { live: 'live', connecting: 'connecting…', offline: 'reconnecting…' }[overall];
}

// ---------------------------------------------------------------- signing in and out

async function pickUser(userId) {
  const error = $('login-error');
  showError(error, '');
  try {
    const device = deviceIdFor(userId);
    const body = device ? { user_id: userId, device_id: device } : { user_id: userId };
    const { token } = await api('POST', '/v1/dev/token', { body, auth: false });
    startSession(userId, token);
  } catch (e) {
    if (e.status === 404) {
      showError(error, 'Development tokens are disabled on this server (it runs with CHORUS_JWT_SECRET). ' +
        'Paste a bearer token from "chorus token <user_id>" below instead.');
      $('login-token-box').open = true;
    } else {
      showError(error, e.message);
    }
  }
}

// The user id of a pasted token is its `sub` claim.
function tokenSubject(token) {
  try {
    const part = token.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part + '='.repeat((4 - (part.length % 4)) % 4))).sub || null;
  } catch {
    return null;
  }
}

function startSession(user, token) {
  sessionStorage.setItem(STORAGE_KEY, JSON.stringify({ user, token }));
  session = { user, token, alive: true, stop: new AbortController(), polls: {}, acks: 0, sends: new Map() };
  groups.clear();
  receipts.clear();
  closeGroup();
  setTotalUnread(0);
  renderGroups();
  $('me').textContent = user;
  $('login').hidden = true;
  $('main').hidden = false;
  setLoop('sync', 'connecting');
  setLoop('receipts', 'connecting');
  syncLoop(session);
  receiptsLoop(session);
}

function signOut(message) {
  if (session) {
    session.alive = false;
    session.stop.abort();
  }
  session = null;
  sessionStorage.removeItem(STORAGE_KEY);
  closeGroup();
  groups.clear();
  receipts.clear();
  setTotalUnread(0);
  renderGroups();
  $('main').hidden = true;
  $('login').hidden = false;
  showError($('login-error'), message || '');
  $('login-user').focus();
}

// ---------------------------------------------------------------- long-poll loops

// One long-poll request. kickPolls() cuts it short; the loop then polls again at once with the
// same cursor (cursors are safe to retry), so the server registers the wait afresh.
async function poll(sess, name, path, cursor) {
  const query = cursor ? `?cursor=${encodeURIComponent(cursor)}&timeout_s=${POLL_TIMEOUT_S}` : '';
  const kick = new AbortController();
  sess.polls[name] = kick;
  try {
    return await api('GET', path + query, { timeoutMs: POLL_HTTP_TIMEOUT_MS, kick: kick.signal });
  } finally {
    if (sess.polls[name] === kick) delete sess.polls[name];
  }
}

// After creating a group: a poll already waiting is not woken by that group's news (the
// server registered its wait before the group existed), so make both polls start over.
function kickPolls() {
  for (const kick of Object.values(session?.polls || {})) kick.abort();
}

// GET /v1/sync: which of my groups changed. Without a cursor it answers at once (with no
// groups); the state is (re)read after taking that cursor, so nothing falls in between.
async function syncLoop(sess) {
  let cursor = null;
  for (let attempt = 0; sess.alive;) {
    try {
      const acksBefore = sess.acks;
      const page = await poll(sess, 'sync', '/v1/sync', cursor);
      if (!sess.alive) return;
      if (cursor === null) await reloadState(sess);
      else syncReported(sess, page, acksBefore);
      cursor = page.cursor;
      attempt = 0;
      setLoop('sync', 'live');
    } catch (e) {
      if (!sess.alive || e.status === 401) return;
      if (e.code === 'kicked') continue;
      if (e.status === 410) { cursor = null; continue; } // cursor_expired: start over at once
      if (e.status === 400) cursor = null; // a cursor this server does not know: start over
      setLoop('sync', 'offline');
      await sleep(backoff(e, attempt++), sess);
    }
  }
}

// GET /v1/receipts: read counts of my messages changed.
async function receiptsLoop(sess) {
  let cursor = null;
  for (let attempt = 0; sess.alive;) {
    try {
      const page = await poll(sess, 'receipts', '/v1/receipts', cursor);
      if (!sess.alive) return;
      if (cursor === null && open) {
        // (Re)starting: counts may have changed unseen; re-read them for the open group.
        receipts.clear();
        await openGroup(open.id);
      }
      cursor = page.cursor;
      for (const c of page.changes) setReceipt(c.group_id, c.msg_id, c, true);
      attempt = 0;
      setLoop('receipts', 'live');
    } catch (e) {
      if (!sess.alive || e.status === 401) return;
      if (e.code === 'kicked') continue;
      if (e.status === 410) { cursor = null; continue; }
      if (e.status === 400) cursor = null;
      setLoop('receipts', 'offline');
      await sleep(backoff(e, attempt++), sess);
    }
  }
}

// Reads the whole chat list, most recent first. A group that moves to the top while the pages
// are read is missed here but reported by /v1/sync, whose cursor was taken before.
async function reloadState(sess) {
  const fresh = [];
  let cursor = null;
  let total = 0;
  do {
    const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
    const page = await api('GET', `/v1/me/groups?order=recent&limit=200${q}`);
    fresh.push(...page.groups);
    total = page.total_unread;
    cursor = page.has_more ? page.next_cursor : null;
  } while (cursor && sess.alive);
  if (!sess.alive) return;
  const stillOpen = open && fresh.some((g) => g.group_id === open.id);
  if (open && !stillOpen) leftGroup(open.id);
  groups.clear();
  for (const g of fresh) groups.set(g.group_id, g);
  setTotalUnread(total);
  renderGroups();
  if (stillOpen) await openGroup(open.id);
}

// One /v1/sync answer: groups with their current state, groups I left or was removed from,
// and the total unread.
function syncReported(sess, page, acksBefore) {
  for (const id of page.removed_group_ids || []) {
    if (open && open.id === id) leftGroup(id);
    groups.delete(id);
  }
  // Each is the group's whole current state: replaced, not merged (last_message may be gone).
  for (const g of page.groups) groups.set(g.group_id, g);
  const renamed = open && groups.get(open.id);
  if (renamed) $('chat-title').textContent = renamed.name;
  // The total was counted while the poll waited; an ack of mine answered meanwhile may or may
  // not be in it (my own reads are not reported back to me), so then ask for it afresh.
  if (sess.acks === acksBefore) setTotalUnread(page.total_unread);
  else refreshTotalUnread(sess);
  renderGroups();
  if (open && page.groups.some((g) => g.group_id === open.id)) pullNew();
}

// Reads total_unread again (a one-group page of the chat list carries it), until no ack of
// mine answered while it was being read.
async function refreshTotalUnread(sess) {
  for (let tries = 0; tries < 3 && sess.alive; tries++) {
    const acksBefore = sess.acks;
    try {
      const page = await api('GET', '/v1/me/groups?order=recent&limit=1');
      if (!sess.alive) return;
      if (sess.acks === acksBefore) { setTotalUnread(page.total_unread); return; }
    } catch (e) {
      if (!sess.alive || e.status === 401) return;
      await sleep(backoff(e, tries), sess);
    }
  }
}

// The open group is gone from my groups (I left it elsewhere or was removed): close it, say so.
function leftGroup(groupId) {
  const name = groups.get(groupId)?.name || `Group #${groupId}`;
  closeGroup();
  showNotice(`You are no longer a member of “${name}”.`);
}

// ---------------------------------------------------------------- groups

// An RFC 3339 time in microseconds since the epoch: the server orders by microseconds, and
// Date keeps only milliseconds.
function micros(iso) {
  const ms = Date.parse(String(iso).replace(/\.\d+/, ''));
  const fraction = /\.(\d+)/.exec(iso);
  return (Number.isNaN(ms) ? 0 : ms * 1000) + (fraction ? Number(fraction[1].padEnd(6, '0').slice(0, 6)) : 0);
}

// The server's order=recent: latest activity first, ties by group id descending.
function byRecentActivity(a, b) {
  return (micros(b.last_activity_at) - micros(a.last_activity_at)) || (b.group_id - a.group_id);
}

function renderPreview(g) {
  const m = g.last_message;
  if (!m) return el('span', { className: 'preview muted', testid: 'group-preview', text: 'No messages yet' });
  if (m.kind && m.kind !== 'message') {
    return el('span', { className: 'preview muted', testid: 'group-preview', text: lastLineText(m) });
  }
  return el('span', { className: 'preview', testid: 'group-preview' },
    el('span', { className: 'preview-sender', text: `${m.sender_id}: ` }),
    m.preview + (m.truncated ? '…' : ''));
}

// The chat list's line for a last entry that is not a message: the same words as the line in
// the chat (the server sends a system line's `detail` with it).
function lastLineText(m) {
  switch (m.kind) {
    case 'recalled':
    case 'deleted': return retractedText(m);
    default: return SYSTEM_KINDS.has(m.kind) ? systemLineText(m) : 'New activity';
  }
}

// The unread badge and, apart from it, the badge saying someone mentioned me: "@", or "@3"
// when several unread messages do.
function renderBadges(g, isOpen) {
  const mentions = g.unread_mention_count || 0;
  const mention = el('span', {
    className: 'badge mention', testid: 'mention-badge', text: mentions > 1 ? `@${mentions}` : '@',
    title: `${mentions} unread message${mentions === 1 ? '' : 's'} mention${mentions === 1 ? 's' : ''} you`,
  });
  mention.hidden = isOpen || mentions === 0;
  const unread = el('span', { className: 'badge', testid: 'unread-badge', text: String(g.unread_count) });
  unread.hidden = isOpen || !(g.unread_count > 0);
  return [mention, unread];
}

function renderGroups() {
  const list = $('groups');
  const items = [...groups.values()].sort(byRecentActivity).map((g) => {
    const isOpen = open && open.id === g.group_id;
    const button = el('button', {
      type: 'button', className: 'group' + (isOpen ? ' active' : ''), testid: 'group',
      title: `Group #${g.group_id}`,
    }, el('span', { className: 'text' },
      el('span', { className: 'top' },
        el('span', { className: 'name', testid: 'group-name', text: g.name }),
        el('time', {
          className: 'chat-time', testid: 'group-time', dateTime: g.last_activity_at || '',
          title: g.last_activity_at ? formatTime(g.last_activity_at) : '',
          text: g.last_activity_at ? formatChatTime(g.last_activity_at) : '',
        })),
      renderPreview(g)),
    ...renderBadges(g, isOpen));
    button.dataset.groupId = g.group_id;
    button.addEventListener('click', () => showGroup(g.group_id));
    return el('li', {}, button);
  });
  list.replaceChildren(...items);
  $('groups-empty').hidden = groups.size > 0 || !session;
}

// The header badge and the document title, e.g. "(3) Chorus".
function setTotalUnread(n) {
  totalUnread = Math.max(0, n || 0);
  const badge = $('total-unread');
  badge.textContent = String(totalUnread);
  badge.hidden = totalUnread === 0;
  document.title = totalUnread > 0 ? `(${totalUnread}) ${TITLE}` : TITLE;
}

function showNotice(message) {
  $('chat-notice-text').textContent = message || '';
  $('chat-notice').hidden = !message;
}

async function createGroup(name, memberIds) {
  const error = $('new-group-error');
  showError(error, '');
  try {
    const g = await api('POST', '/v1/groups', { body: { name, member_ids: memberIds } });
    groups.set(g.group_id, {
      group_id: g.group_id, name: g.name, last_msg_id: g.last_msg_id,
      last_ack_msg_id: g.last_msg_id, last_read_msg_id: g.last_msg_id, unread_count: 0,
      last_activity_at: g.created_at,
    });
    $('new-group').reset();
    kickPolls();
    const shown = showGroup(g.group_id); // the chat is on screen before the history loads
    // Focus moves now, not once the history has loaded: by then the user may be typing
    // elsewhere (the next group's name), and a late focus() would send their keys here.
    $('composer-input').focus();
    await shown;
  } catch (e) {
    if (e.status !== 401) showError(error, e.message);
  }
}

// ---------------------------------------------------------------- the open group

// Narrow screens show the list or the chat (app.css); wide ones show both, whatever the view.
function setView(view) {
  $('main').dataset.view = view;
}

// The user opens a group. On a narrow screen the chat covers the list, and a history entry
// lets the phone's back button (or the header's) return to the list.
function showGroup(groupId) {
  showNotice('');
  // While a history.back() of ours is under way, its popstate pushes the entry instead.
  if (NARROW.matches && !chatEntry && !chatEntryDropping) pushChatEntry();
  return openGroup(groupId);
}

function pushChatEntry() {
  history.pushState({ chorusChat: true }, '');
  chatEntry = true;
}

// The back button of the phone or the browser, on a chat opened on a narrow screen.
function onPopState() {
  if (chatEntryDropping) {
    chatEntryDropping = false;
    if (open && NARROW.matches && !chatEntry) pushChatEntry(); // a group opened meanwhile
    return;
  }
  if (chatEntry) {
    chatEntry = false;
    backToList();
  }
}

// The header's back button (narrow screens): the list again, with the group just left focused.
function backToList() {
  const id = open?.id;
  closeGroup();
  renderGroups();
  if (id !== undefined) $('groups').querySelector(`[data-group-id="${id}"]`)?.focus();
}

function closeGroup() {
  open = null;
  showNotice('');
  closeMembers();
  if (chatEntry) { // the chat's history entry goes with it
    chatEntry = false;
    chatEntryDropping = true;
    history.back();
  }
  setView('list');
  $('chat').hidden = true;
  $('chat-empty').hidden = false;
  $('messages').replaceChildren();
}

// The header of the open group, from GET /v1/groups/{g}.
function showGroupInfo(o, info) {
  o.ownerId = info.owner_id;
  $('chat-title').textContent = info.name;
  $('chat-sub').textContent = `#${info.group_id} · ${info.member_count} member${info.member_count === 1 ? '' : 's'} · owner ${info.owner_id}`;
}

async function openGroup(groupId) {
  const sess = session;
  const o = {
    id: groupId, ownerId: null, entries: new Map(), nodes: new Map(), changes: new Map(),
    memberIds: new Set(), pending: new Map(), highest: 0, oldest: null,
    loaded: false, pulling: false, again: false,
  };
  if (roster && roster.groupId !== groupId) closeMembers();
  if (replyingTo && replyingTo.groupId !== groupId) setReplyTo(null);
  open = o;
  setView('chat');
  const g = groups.get(groupId);
  $('chat-title').textContent = g ? g.name : `Group #${groupId}`;
  $('chat-sub').textContent = '';
  $('messages').replaceChildren();
  $('load-older').hidden = true;
  showError($('chat-error'), '');
  $('chat-empty').hidden = true;
  $('chat').hidden = false;
  $('chat').dataset.state = 'loading'; // 'ready' once history and newer messages are shown
  renderGroups();
  try {
    const info = await withRetry(() => api('GET', `/v1/groups/${groupId}`), sess);
    if (open !== o) return;
    showGroupInfo(o, info);
    const membersRead = loadMemberIds(o); // alongside the history; needed for @mentions
    const page = await withRetry(() => api('GET',
      `/v1/groups/${groupId}/messages?before_msg_id=${info.last_msg_id + 1}&limit=${HISTORY_PAGE}&with_receipts=true`), sess);
    if (open !== o) return;
    addMessages(o, page.messages);
    $('load-older').hidden = !page.has_more;
    scrollToBottom();
    o.loaded = true;
    await pullNew(); // anything sent while the history loaded
    await membersRead;
    if (open === o) $('chat').dataset.state = 'ready';
  } catch (e) {
    if (open === o && sess.alive && e.status !== 401) showError($('chat-error'), `Could not load this group: ${e.message}`);
  }
}

// The members' ids, for recognising @mentions in the composer. Large groups are read only in
// part: an @id beyond that is sent as plain text.
async function loadMemberIds(o) {
  const ids = new Set();
  try {
    let cursor = null;
    let pages = 0;
    do {
      const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const page = await withRetry(() => api('GET', `/v1/groups/${o.id}/members?limit=${MEMBER_PAGE}${q}`), session, 4);
      for (const m of page.members) ids.add(m.user_id);
      cursor = page.has_more ? page.next_cursor : null;
    } while (cursor && ++pages < MEMBER_ID_PAGES && open === o);
  } catch (e) {
    if (e.status !== 401) console.warn('could not read the members', e);
    return;
  }
  if (open === o) o.memberIds = ids;
}

// A membership line arrived: the header's member count and the known members are stale.
async function membersChanged(o) {
  try {
    const info = await api('GET', `/v1/groups/${o.id}`);
    if (open !== o) return;
    showGroupInfo(o, info);
    loadMemberIds(o);
  } catch { /* a member who was just removed may not read the group any more */ }
}

async function loadOlder() {
  const o = open;
  const sess = session;
  if (!o || o.oldest === null) return;
  const scroller = $('scroller');
  const fromBottom = scroller.scrollHeight - scroller.scrollTop;
  try {
    const page = await withRetry(() => api('GET',
      `/v1/groups/${o.id}/messages?before_msg_id=${o.oldest}&limit=${HISTORY_PAGE}&with_receipts=true`), sess);
    if (open !== o) return;
    addMessages(o, page.messages);
    $('load-older').hidden = !page.has_more;
    scroller.scrollTop = scroller.scrollHeight - fromBottom;
  } catch (e) {
    if (e.status !== 401) showError($('chat-error'), e.message);
  }
}

// Pulls the open group's messages after the highest shown, then acks. One pull at a time;
// a report arriving meanwhile makes it pull once more.
async function pullNew() {
  const o = open;
  const sess = session;
  if (!o) return;
  if (!o.loaded || o.pulling) { o.again = true; return; }
  o.pulling = true;
  try {
    do {
      o.again = false;
      for (let more = true; more && open === o;) {
        const page = await withRetry(() => api('GET',
          `/v1/groups/${o.id}/messages?after_msg_id=${o.highest}&limit=${PULL_PAGE}&with_receipts=true`), sess);
        if (open !== o) return;
        addMessages(o, page.messages);
        if (page.messages.some((m) => MEMBERSHIP_KINDS.has(m.kind))) membersChanged(o);
        more = page.has_more && page.messages.length > 0;
      }
    } while (o.again && open === o);
  } catch (e) {
    if (open === o && sess.alive && e.status !== 401) showError($('chat-error'), e.message);
  } finally {
    o.pulling = false;
  }
  scheduleAck();
}

function isNearBottom() {
  const s = $('scroller');
  return s.scrollHeight - s.scrollTop - s.clientHeight < 80;
}
function scrollToBottom() {
  const s = $('scroller');
  s.scrollTop = s.scrollHeight;
}

// Adds log entries (deduplicated by msg_id) in msg_id order, before any still-pending sends.
// A change entry is not shown: it updates its target instead.
function addMessages(o, list) {
  if (!session) return;
  const stick = isNearBottom();
  let mine = false;
  for (const m of list) {
    if (m.receipt) setReceipt(m.group_id, m.msg_id, m.receipt, false);
    o.highest = Math.max(o.highest, m.msg_id);
    o.oldest = o.oldest === null ? m.msg_id : Math.min(o.oldest, m.msg_id);
    if (CHANGE_KINDS.has(m.kind)) { applyChange(o, m); continue; }
    if (o.entries.has(m.msg_id)) { updateEntry(o, m.msg_id, stateOf(m)); continue; }
    mine = showEntry(o, m) || mine;
  }
  markRuns();
  if (stick || mine) scrollToBottom();
}

// Stores and shows an entry not seen before; true when it replaces one of my pending sends.
function showEntry(o, m) {
  const entry = { ...m };
  const known = o.changes.get(m.msg_id); // a change entry that came before its target
  if (known) {
    o.changes.delete(m.msg_id);
    if (isNewer(known, stateOf(entry))) setState(entry, known);
  }
  o.entries.set(m.msg_id, entry);
  const node = renderEntry(o, entry);
  o.nodes.set(m.msg_id, node);
  const ol = $('messages');
  const next = [...ol.children].find((c) => c.dataset.pending || Number(c.dataset.msgId) > m.msg_id);
  ol.insertBefore(node, next || null);
  const pending = m.sender_id === session.user && o.pending.get(m.client_msg_id);
  if (!pending) return false;
  pending.remove();
  o.pending.delete(m.client_msg_id);
  return true;
}

// A recall, edit or delete: its `target` is the target as it is now (absent when I may not
// see the target). Applied to the stored target, or kept until the target is loaded.
function applyChange(o, change) {
  const t = change.target;
  if (!t) return;
  if (o.entries.has(t.msg_id)) { updateEntry(o, t.msg_id, stateOf(t)); return; }
  const known = o.changes.get(t.msg_id);
  if (!known || isNewer(stateOf(t), known)) o.changes.set(t.msg_id, stateOf(t));
}

// The part of a message that changes after it was sent.
function stateOf(m) {
  return { kind: m.kind, content: m.content, edited_at: m.edited_at, retracted_at: m.retracted_at };
}

// Pages and change entries may be read in any order, so the newer of two states of one
// message wins: a message only ever goes on to a later edit, then to recalled or deleted.
function isNewer(a, b) {
  const rank = (s) => [RETRACTED_KINDS.has(s.kind) ? 1 : 0, s.edited_at ? micros(s.edited_at) : 0];
  const [ra, rb] = [rank(a), rank(b)];
  return ra[0] !== rb[0] ? ra[0] > rb[0] : ra[1] > rb[1];
}

function setState(entry, state) {
  Object.assign(entry, state);
  if (RETRACTED_KINDS.has(entry.kind)) { // erased on the server too
    for (const k of ['mentions', 'mention_all', 'reply_to', 'reply_to_msg_id', 'ext']) delete entry[k];
  }
}

// A stored entry got a newer state: it is drawn again in its place, and so are the replies
// quoting it and the composer's reply bar.
function updateEntry(o, msgId, state) {
  const entry = o.entries.get(msgId);
  if (!entry || !isNewer(state, stateOf(entry))) return;
  setState(entry, state);
  redraw(o, entry);
  for (const reply of o.entries.values()) {
    if (reply.reply_to?.msg_id !== msgId) continue;
    reply.reply_to = { ...reply.reply_to, kind: entry.kind, ...previewOf(entry.content) };
    redraw(o, reply);
  }
  if (replyingTo?.groupId === o.id && replyingTo.msgId === msgId) {
    setReplyTo(RETRACTED_KINDS.has(entry.kind) ? null : { ...replyingTo, ...previewOf(entry.content) });
  }
  updateLastMessage(groups.get(o.id), entry);
}

function redraw(o, entry) {
  const old = o.nodes.get(entry.msg_id);
  if (!old) return;
  const node = renderEntry(o, entry);
  old.replaceWith(node);
  o.nodes.set(entry.msg_id, node);
  markRuns();
}

// The first characters of a text, as the server cuts previews (characters, not UTF-16 units).
function previewOf(content) {
  const chars = Array.from(content || '');
  return { preview: chars.slice(0, PREVIEW_CHARS).join(''), truncated: chars.length > PREVIEW_CHARS };
}

// A run: consecutive messages of one sender, each within RUN_GAP_MS of the one before. Only
// its first message shows the sender and time (the others have class "cont"). Lines (system
// lines, recalled messages) end a run. Recomputed over the whole list, since older pages and
// pending sends insert anywhere.
function markRuns() {
  let prev = null;
  for (const li of $('messages').children) {
    const cont = !!prev && li.classList.contains('msg') && prev.classList.contains('msg') &&
      prev.dataset.sender === li.dataset.sender &&
      Math.abs(Number(li.dataset.at) - Number(prev.dataset.at)) <= RUN_GAP_MS;
    li.classList.toggle('cont', cont);
    prev = li;
  }
}

// ---------------------------------------------------------------- drawing entries

function renderEntry(o, m) {
  let li;
  if (m.kind === 'message') li = renderMessage(o, m);
  else if (RETRACTED_KINDS.has(m.kind)) li = renderLine(m, 'message-retracted', retractedText(m));
  else if (SYSTEM_KINDS.has(m.kind)) li = renderLine(m, 'system-line', systemLineText(m));
  else li = renderLine(m, 'system-line', 'Something this client cannot show');
  li.dataset.msgId = m.msg_id;
  li.dataset.kind = m.kind;
  li.dataset.sender = m.sender_id;
  li.dataset.at = String(Date.parse(m.created_at) || 0);
  return li;
}

function renderLine(m, testid, text) {
  return el('li', { className: 'line', testid },
    el('span', { testid: 'line-text', text, title: formatTime(m.retracted_at || m.created_at) }));
}

function retractedText(m) {
  return m.kind === 'recalled' ? `${who(m.sender_id, true)} recalled a message` : 'A message was deleted by the owner';
}

// "alice added bob and carol", "carol left", "alice removed dave", "alice renamed the group to …".
function systemLineText(m) {
  const actor = who(m.sender_id, true);
  const d = m.detail || {};
  switch (m.kind) {
    case 'member_joined': return `${actor} added ${namesText(d)}`;
    case 'member_left': return `${actor} left`;
    case 'member_removed': return `${actor} removed ${namesText(d)}`;
    case 'group_renamed': return `${actor} renamed the group to “${d.name}”`;
    default: return '';
  }
}

// "bob", "bob and carol", "bob, carol and 3 others": a line names at most NAMES_IN_LINE of the
// users; user_count says how many there were (the server lists at most 100).
function namesText(d) {
  const ids = (d.user_ids || []).map((id) => who(id));
  const count = Math.max(d.user_count || 0, ids.length);
  const named = ids.slice(0, NAMES_IN_LINE);
  const others = count - named.length;
  if (others > 0) return `${named.join(', ')} and ${others} other${others === 1 ? '' : 's'}`;
  if (named.length < 2) return named.join('');
  return `${named.slice(0, -1).join(', ')} and ${named[named.length - 1]}`;
}

function mentionsMe(m) {
  return m.sender_id !== session.user && (!!m.mention_all || (m.mentions || []).includes(session.user));
}

function renderMessage(o, m) {
  const own = m.sender_id === session.user;
  const li = el('li', {
    className: 'msg' + (own ? ' own' : '') + (mentionsMe(m) ? ' mentions-me' : ''), testid: 'message',
  },
  el('div', { className: 'meta', testid: 'message-meta' },
    el('span', { className: 'sender', testid: 'message-sender', text: own ? 'you' : m.sender_id }),
    el('time', { dateTime: m.created_at, title: m.created_at, text: formatTime(m.created_at) })),
  m.reply_to_msg_id ? renderQuote(o, m.reply_to) : null,
  el('div', {
    className: 'content', testid: 'message-content',
    title: `${own ? 'you' : m.sender_id}, ${formatTime(m.created_at)}`,
  }, ...withMentions(m.content, mentionIds(m), !own)),
  m.edited_at ? el('span', {
    className: 'edited', testid: 'message-edited', text: '(edited)', title: `edited ${formatTime(m.edited_at)}`,
  }) : null);
  li.tabIndex = -1; // focusable by a tap, which shows the actions on touch screens
  if (own) {
    const line = el('button', { type: 'button', className: 'receipt', testid: 'receipt', title: 'Who has read it?' });
    line.addEventListener('click', () => showWhoRead(m.group_id, m.msg_id));
    li.append(line);
    paintReceipt(li, receipts.get(`${m.group_id}/${m.msg_id}`));
  }
  li.append(renderActions(o, m, li));
  return li;
}

// The quoted message of a reply, as it is now; absent when I may not see it.
function renderQuote(o, q) {
  const box = el('button', { type: 'button', className: 'quote', testid: 'message-quote' });
  if (!q) {
    box.append(el('span', { className: 'quote-text muted', text: 'an earlier message' }));
    return box;
  }
  const gone = RETRACTED_KINDS.has(q.kind);
  box.title = 'Show the quoted message';
  box.append(el('span', { className: 'quote-sender', testid: 'quote-sender', text: who(q.sender_id) }),
    el('span', {
      className: 'quote-text' + (gone ? ' muted' : ''), testid: 'quote-text',
      text: gone ? 'recalled message' : q.preview + (q.truncated ? '…' : ''),
    }));
  box.addEventListener('click', () => flashEntry(o, q.msg_id));
  return box;
}

// Scrolls to a loaded message and marks it for a moment.
function flashEntry(o, msgId) {
  const node = o.nodes.get(msgId);
  if (!node) return;
  node.scrollIntoView({ block: 'center', behavior: 'smooth' });
  node.classList.add('flash');
  setTimeout(() => node.classList.remove('flash'), 1500);
}

// ---------------------------------------------------------------- mentions

// Who a message mentions, as the server stored it; "all" for mention_all.
function mentionIds(m) {
  const ids = new Set(m.mentions || []);
  if (m.mention_all) ids.add('all');
  return ids;
}

// The `@id` tokens of a text whose id is in `ids`: [{ start, end, id }]. An @ inside a word
// (an e-mail address) is not one. User ids may hold "@" and ".", so the longest id in `ids`
// that the token starts with is taken: "@bob." is bob followed by a full stop.
function mentionTokens(text, ids) {
  const found = [];
  const token = /@([A-Za-z0-9._@:-]+)/g;
  for (let m; (m = token.exec(text));) {
    if (m.index > 0 && USER_ID_CHAR.test(text[m.index - 1])) continue;
    let id = m[1];
    while (id && !ids.has(id)) id = id.slice(0, -1);
    if (!id) continue;
    found.push({ start: m.index, end: m.index + 1 + id.length, id });
    token.lastIndex = m.index + 1 + id.length;
  }
  return found;
}

// A message's text as text nodes, with its mentions marked; in others' messages, the ones that
// mean me (my id, @all) stand out more.
function withMentions(text, ids, fromOthers) {
  const parts = [];
  let at = 0;
  for (const t of mentionTokens(text, ids)) {
    parts.push(text.slice(at, t.start));
    const me = fromOthers && (t.id === session.user || t.id === 'all');
    parts.push(el('span', { className: 'mention' + (me ? ' me' : ''), testid: 'mention', text: text.slice(t.start, t.end) }));
    at = t.end;
  }
  parts.push(text.slice(at));
  return parts.filter((p) => p !== '');
}

// What the composer's text mentions among the open group's members: { mentions, mention_all }
// for the send, or { error }. Only the owner's @all mentions everyone.
function composeMentions(o, text) {
  const ids = new Set(o.memberIds);
  const iOwn = o.ownerId === session.user;
  if (iOwn) ids.add('all');
  const found = new Set(mentionTokens(text, ids).map((t) => t.id));
  const all = iOwn && found.delete('all');
  found.delete(session.user);
  if (found.size > MAX_MENTIONS) return { error: `A message mentions at most ${MAX_MENTIONS} people (${found.size} here).` };
  const out = {};
  if (found.size) out.mentions = [...found];
  if (all) out.mention_all = true;
  return out;
}

function paintReceipt(li, r) {
  const line = li.querySelector('.receipt');
  if (!line) return;
  line.textContent = r ? `read by ${r.read_count} · unread ${r.unread_count}` : 'read by … · unread …';
  line.classList.toggle('all-read', !!r && r.unread_count === 0 && r.read_count > 0);
}

// Counts from a page (force=false) only fill a gap: the change feed, which always brings the
// newest counts, must not be overwritten by a page that was read before it.
function setReceipt(groupId, msgId, counts, force) {
  const key = `${groupId}/${msgId}`;
  if (!force && receipts.has(key)) return;
  const { read_count, unread_count, delivered_count } = counts;
  receipts.set(key, { read_count, unread_count, delivered_count });
  const node = open && open.id === groupId && open.nodes.get(msgId);
  if (node) paintReceipt(node, receipts.get(key));
}

// ---------------------------------------------------------------- acks

let ackTimer = null;
let acking = false;

function scheduleAck() {
  if (!ackTimer) ackTimer = setTimeout(flushAck, 150);
}

// Acks (delivered and read) the highest message shown in the open group, while visible.
async function flushAck() {
  ackTimer = null;
  const o = open;
  const sess = session;
  if (!o || !sess || acking || document.visibilityState !== 'visible') return;
  const g = groups.get(o.id);
  const target = o.highest;
  if (!g || target <= g.last_read_msg_id) return;
  acking = true;
  try {
    const cur = await withRetry(() => api('POST', `/v1/groups/${o.id}/ack`, { body: { last_ack_msg_id: target } }), sess);
    if (!sess.alive) return;
    // My own reads are not reported back to me by /v1/sync: the total follows the ack here.
    sess.acks++;
    setTotalUnread(totalUnread + cur.unread_count - g.unread_count);
    Object.assign(g, cur);
    renderGroups();
  } catch (e) {
    if (sess.alive && e.status !== 401) console.warn('ack failed', e);
    return;
  } finally {
    acking = false;
  }
  if (open === o && o.highest > g.last_read_msg_id) scheduleAck();
}

// ---------------------------------------------------------------- sending

// Sends the composer's text, with what it mentions and what it replies to (`extras`: the
// request's mentions, mention_all, reply_to_msg_id).
function sendMessage(content, extras) {
  const o = open;
  if (!o) return;
  const clientMsgId = newClientMsgId(); // one per message, reused by every retry
  const quote = extras.reply_to_msg_id ? o.entries.get(extras.reply_to_msg_id) : null;
  const node = el('li', { className: 'msg own pending', testid: 'message-pending' },
    el('div', { className: 'meta' }, el('span', { className: 'sender', text: 'you' })),
    quote ? renderQuote(o, { msg_id: quote.msg_id, kind: quote.kind, sender_id: quote.sender_id, ...previewOf(quote.content) }) : null,
    el('div', { className: 'content', testid: 'message-content', text: content }),
    el('div', { className: 'receipt state', testid: 'send-state', text: 'sending…' }));
  node.dataset.pending = '1';
  node.dataset.sender = session.user;
  node.dataset.at = String(Date.now());
  o.pending.set(clientMsgId, node);
  $('messages').append(node);
  markRuns();
  scrollToBottom();
  // One send at a time per group: the server numbers messages in the order they arrive, and
  // they must keep the order they were written in.
  const sess = session;
  const body = { client_msg_id: clientMsgId, content, ...extras };
  const before = sess.sends.get(o.id) || Promise.resolve();
  const done = before.then(() => deliver(o, sess, body, node));
  sess.sends.set(o.id, done);
  done.then(() => { if (sess.sends.get(o.id) === done) sess.sends.delete(o.id); });
}

async function deliver(o, sess, body, node) {
  const state = node.querySelector('.state');
  state.replaceChildren('sending…');
  for (let attempt = 0; sess.alive; attempt++) {
    try {
      const msg = await api('POST', `/v1/groups/${o.id}/messages`, { body });
      const g = groups.get(o.id);
      if (g) sent(g, msg);
      if (open === o) {
        addMessages(o, [msg]);
        fetchReceipt(o, msg.msg_id);
        scheduleAck(); // acks it if the send left my read cursor behind (see sent())
      }
      return;
    } catch (e) {
      if (!sess.alive || e.status === 401) return;
      if (!retriable(e) || attempt + 1 >= SEND_ATTEMPTS) {
        const retry = el('button', { type: 'button', className: 'link', testid: 'send-retry', text: 'retry' });
        retry.addEventListener('click', () => deliver(o, sess, body, node));
        state.replaceChildren(`not sent: ${e.message} `, retry);
        node.classList.add('failed');
        return;
      }
      state.replaceChildren(`sending… (retry ${attempt + 1})`);
      await sleep(backoff(e, attempt), sess);
    }
  }
}

// An entry of mine was appended: the server moves my cursors onto it only if they were at the
// entry just before it (I had everything); own entries never count as unread, so
// unread_count stays. A message becomes the group's preview and moves it to the top; a change
// entry only changes the preview when it changed the message previewed.
function sent(g, msg) {
  if (msg.msg_id > g.last_msg_id) {
    if (g.last_read_msg_id === msg.msg_id - 1) g.last_read_msg_id = msg.msg_id;
    if (g.last_ack_msg_id === msg.msg_id - 1) g.last_ack_msg_id = msg.msg_id;
    g.last_msg_id = msg.msg_id;
  }
  if (CHANGE_KINDS.has(msg.kind)) {
    if (msg.target) updateLastMessage(g, msg.target);
  } else if (!g.last_message || g.last_message.msg_id <= msg.msg_id) {
    g.last_message = {
      msg_id: msg.msg_id, kind: msg.kind, sender_id: msg.sender_id, created_at: msg.created_at,
      ...previewOf(msg.content),
    };
    g.last_activity_at = msg.created_at;
  }
  renderGroups();
}

// The chat list's preview follows a change of the message it shows.
function updateLastMessage(g, m) {
  const last = g?.last_message;
  if (!last || last.msg_id !== m.msg_id || (last.kind === m.kind && !m.edited_at)) return;
  Object.assign(last, { kind: m.kind, ...previewOf(m.content) });
  renderGroups();
}

// A recall, edit or delete of message `targetId`, by the same path as a send (idempotent by
// client_msg_id, so retried on network errors). A refusal is said in the chat; gives whether
// it was stored.
async function changeMessage(o, kind, targetId, content) {
  const sess = session;
  const body = { client_msg_id: newClientMsgId(), kind, target_msg_id: targetId };
  if (content !== undefined) body.content = content;
  showError($('chat-error'), '');
  try {
    const change = await withRetry(() => api('POST', `/v1/groups/${o.id}/messages`, { body }), sess, SEND_ATTEMPTS);
    if (!sess.alive) return false;
    const g = groups.get(o.id);
    if (g) sent(g, change);
    if (open === o) { addMessages(o, [change]); scheduleAck(); }
    return true;
  } catch (e) {
    if (sess.alive && e.status !== 401 && open === o) showError($('chat-error'), refusalText(kind, e));
    return false;
  }
}

// Why a change was refused, in the user's words; the server's message otherwise.
function refusalText(kind, e) {
  const verb = { recall: 'recall', edit: 'edit', delete: 'delete' }[kind];
  switch (e.code) {
    case 'recall_window_passed':
      return 'Too late to recall this message: the time for recalling it has passed.';
    case 'edit_window_passed':
      return 'Too late to edit this message: the time for editing it has passed.';
    case 'message_retracted':
      return `Could not ${verb} this message: it was already recalled or deleted.`;
    default:
      return `Could not ${verb} this message: ${e.message}`;
  }
}

// ---------------------------------------------------------------- actions on a message

// Reply for everyone; Edit and Recall for the sender; Delete for the owner. Edit and Recall are
// offered at any age: the window is the server's setting (CHORUS_*_WINDOW_SECS), and a change
// it refuses says so.
function renderActions(o, m, li) {
  const own = m.sender_id === session.user;
  const bar = el('div', { className: 'actions', testid: 'message-actions' });
  const action = (name, label, onClick) => {
    const b = el('button', { type: 'button', className: 'link small', testid: `action-${name}`, text: label });
    b.addEventListener('click', onClick);
    bar.append(b);
  };
  action('reply', 'Reply', () => startReply(o, m));
  if (own) {
    action('edit', 'Edit', () => startEdit(o, m, li));
    action('recall', 'Recall', () => changeMessage(o, 'recall', m.msg_id));
  }
  if (o.ownerId === session.user) {
    action('delete', 'Delete', () => confirmDelete(o, m, li));
  }
  return bar;
}

function startReply(o, m) {
  setReplyTo({ groupId: o.id, msgId: m.msg_id, senderId: m.sender_id, ...previewOf(m.content) });
  $('composer-input').focus();
}

// The composer's "replying to" bar; null cancels the reply.
function setReplyTo(r) {
  replyingTo = r;
  $('reply-bar').hidden = !r;
  if (!r) return;
  $('reply-bar-sender').textContent = who(r.senderId);
  $('reply-bar-text').textContent = r.preview + (r.truncated ? '…' : '');
}

// The owner deletes a message for everyone, after saying yes under it.
function confirmDelete(o, m, li) {
  if (li.querySelector('.confirm')) return;
  const box = el('div', { className: 'confirm', testid: 'delete-confirm' },
    el('span', { text: 'Delete this message for everyone?' }));
  const yes = el('button', { type: 'button', className: 'danger small', testid: 'delete-yes', text: 'Delete' });
  const no = el('button', { type: 'button', className: 'secondary small', testid: 'delete-no', text: 'Cancel' });
  yes.addEventListener('click', async () => {
    yes.disabled = true;
    if (!(await changeMessage(o, 'delete', m.msg_id))) box.remove();
  });
  no.addEventListener('click', () => box.remove());
  box.append(yes, no);
  li.append(box);
  yes.focus();
}

// Edits my message in place: its text becomes a small form (Enter saves, Escape cancels).
function startEdit(o, m, li) {
  const content = li.querySelector('.content');
  if (!content || li.querySelector('.edit')) return;
  const input = el('textarea', { className: 'edit-input', testid: 'edit-input', rows: 2, value: m.content });
  const save = el('button', { type: 'submit', className: 'small', testid: 'edit-save', text: 'Save' });
  const cancel = el('button', { type: 'button', className: 'secondary small', testid: 'edit-cancel', text: 'Cancel' });
  const form = el('form', { className: 'edit', testid: 'edit-form' }, input, el('div', { className: 'row' }, save, cancel));
  const stop = () => { form.replaceWith(content); };
  cancel.addEventListener('click', stop);
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') { ev.preventDefault(); stop(); }
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const text = input.value;
    if (text === m.content) { stop(); return; }
    if (!text.trim()) { showError($('chat-error'), 'An edited message cannot be empty; recall it instead.'); return; }
    save.disabled = true;
    // Stored: the message is drawn again with its new text, which removes the form.
    if (!(await changeMessage(o, 'edit', m.msg_id, text))) save.disabled = false;
  });
  content.replaceWith(form);
  input.focus();
}

// The counts of a message I just sent (its send answer carries none).
async function fetchReceipt(o, msgId) {
  if (receipts.has(`${o.id}/${msgId}`)) return;
  try {
    const page = await withRetry(() => api('GET',
      `/v1/groups/${o.id}/messages?after_msg_id=${msgId - 1}&limit=1&with_receipts=true`), session, 4);
    for (const m of page.messages) if (m.receipt) setReceipt(m.group_id, m.msg_id, m.receipt, false);
  } catch { /* the change feed will bring them when they change */ }
}

// ---------------------------------------------------------------- who read it

async function showWhoRead(groupId, msgId) {
  const dialog = $('who-read');
  const status = $('who-read-status');
  const readList = $('who-read-read');
  const unreadList = $('who-read-unread');
  $('who-read-title').textContent = `Who read message #${msgId}`;
  status.textContent = 'Loading…';
  readList.replaceChildren();
  unreadList.replaceChildren();
  if (!dialog.open) dialog.showModal();
  const read = [];
  const unread = [];
  try {
    let cursor = null;
    let pages = 0;
    do {
      const q = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
      const page = await api('GET', `/v1/groups/${groupId}/messages/${msgId}/receipts?limit=200${q}`);
      read.push(...page.read_user_ids);
      unread.push(...page.unread_user_ids);
      status.textContent = `${page.read_count} read · ${page.unread_count} not yet · ${page.delivered_count} delivered`;
      setReceipt(groupId, msgId, page, true);
      cursor = page.has_more ? page.next_cursor : null;
    } while (cursor && ++pages < 50);
  } catch (e) {
    status.textContent = e.message;
    return;
  }
  const item = (id) => el('li', { testid: 'who-read-user', text: id });
  const none = () => el('li', { className: 'muted', text: 'nobody' });
  readList.replaceChildren(...(read.length ? read.map(item) : [none()]));
  unreadList.replaceChildren(...(unread.length ? unread.map(item) : [none()]));
}

// ---------------------------------------------------------------- members

// The members dialog of the open group. Everyone sees the list; the owner gets an add form
// and a remove button per member, everyone else a way to leave. Refusals show the server's
// message.
function openMembers() {
  const o = open;
  if (!o) return;
  const r = { groupId: o.id, ownerId: o.ownerId, members: [], nextCursor: null };
  roster = r;
  $('members-title').textContent = `Members of “${$('chat-title').textContent}”`;
  $('members-list').replaceChildren();
  $('add-members').reset();
  $('add-members').hidden = true;
  $('rename').hidden = true;
  $('leave').hidden = true;
  $('leave-confirm').hidden = true;
  $('owner-stays').hidden = true;
  $('members-more').hidden = true;
  membersSaid('', '');
  const dialog = $('members');
  if (!dialog.open) dialog.showModal();
  loadMembers(r);
}

function closeMembers() {
  roster = null;
  const dialog = $('members');
  if (dialog.open) dialog.close();
}

// What the last change did (info) or why it was refused (error).
function membersSaid(info, error) {
  showError($('members-info'), info);
  showError($('members-error'), error);
}

// (Re)reads the group (owner, count) and the first page of members; `more` reads the next page.
async function loadMembers(r, more = false) {
  if (roster !== r) return; // the dialog was closed meanwhile
  const status = $('members-status');
  status.textContent = 'Loading…';
  try {
    const info = more ? null : await api('GET', `/v1/groups/${r.groupId}`);
    const q = more ? `&cursor=${encodeURIComponent(r.nextCursor)}` : '';
    const page = await api('GET', `/v1/groups/${r.groupId}/members?limit=${MEMBER_PAGE}${q}`);
    if (roster !== r) return;
    if (info) {
      r.ownerId = info.owner_id;
      r.memberCount = info.member_count;
      if (open && open.id === r.groupId) showGroupInfo(open, info);
    }
    r.members = more ? r.members.concat(page.members) : page.members;
    r.nextCursor = page.has_more ? page.next_cursor : null;
    renderMembers(r);
  } catch (e) {
    if (roster !== r || e.status === 401) return;
    status.textContent = '';
    membersSaid('', `Could not read the members: ${e.message}`);
  }
}

function renderMembers(r) {
  const me = session.user;
  const iOwn = r.ownerId === me;
  const count = r.memberCount ?? r.members.length;
  $('members-status').textContent = `${count} member${count === 1 ? '' : 's'} · owner ${r.ownerId}`;
  $('members-list').replaceChildren(...r.members.map((m) => {
    const li = el('li', { testid: 'member' },
      el('span', { className: 'member-id', testid: 'member-id', text: m.user_id }),
      m.role === 'owner' ? el('span', { className: 'tag', text: 'owner' }) : null,
      m.user_id === me ? el('span', { className: 'tag', text: 'you' }) : null);
    li.dataset.userId = m.user_id;
    if (iOwn && m.role !== 'owner') {
      const remove = el('button', {
        type: 'button', className: 'link small', testid: 'member-remove', text: 'remove',
        title: `Remove ${m.user_id} from the group`,
      });
      remove.addEventListener('click', () => removeMember(r, m.user_id));
      li.append(remove);
    }
    return li;
  }));
  $('members-more').hidden = !r.nextCursor;
  $('add-members').hidden = !iOwn;
  if (iOwn && $('rename').hidden) $('rename-input').value = groups.get(r.groupId)?.name || $('chat-title').textContent;
  $('rename').hidden = !iOwn;
  $('leave').hidden = iOwn;
  $('owner-stays').hidden = !iOwn;
}

async function addMembers(r, text) {
  const parsed = parseUserIds(text);
  if (parsed.error) { membersSaid('', parsed.error); $('add-members-input').focus(); return; }
  if (!parsed.ids.length) { membersSaid('', 'Enter the user ids to add, e.g. dave, erin.'); return; }
  membersSaid('', '');
  try {
    const { added } = await api('POST', `/v1/groups/${r.groupId}/members`, { body: { user_ids: parsed.ids } });
    if (roster !== r) return;
    const already = parsed.ids.filter((id) => !added.includes(id));
    const said = [];
    if (added.length) said.push(`Added ${added.join(', ')}.`);
    if (already.length) said.push(`${already.join(', ')} ${already.length === 1 ? 'was' : 'were'} already in the group.`);
    membersSaid(said.join(' '), '');
    $('add-members').reset();
    if (open && open.id === r.groupId) for (const id of added) open.memberIds.add(id); // @-able at once
  } catch (e) {
    if (roster === r && e.status !== 401) membersSaid('', `Could not add: ${e.message}`);
    return;
  }
  await loadMembers(r);
}

// The owner renames the group; the group_renamed line reaches everyone through the pull.
async function renameGroup(r, name) {
  membersSaid('', '');
  try {
    const info = await api('PATCH', `/v1/groups/${r.groupId}`, { body: { name } });
    const g = groups.get(r.groupId);
    if (g) { g.name = info.name; renderGroups(); }
    if (open && open.id === r.groupId) showGroupInfo(open, info);
    if (roster === r) membersSaid(`Renamed to “${info.name}”.`, '');
  } catch (e) {
    if (roster === r && e.status !== 401) membersSaid('', `Could not rename: ${e.message}`);
  }
}

async function removeMember(r, userId) {
  membersSaid('', '');
  try {
    await api('DELETE', `/v1/groups/${r.groupId}/members/${encodeURIComponent(userId)}`);
    if (open && open.id === r.groupId) open.memberIds.delete(userId);
    if (roster === r) membersSaid(`Removed ${userId}.`, '');
  } catch (e) {
    if (roster !== r || e.status === 401) return;
    membersSaid('', `Could not remove ${userId}: ${e.message}`);
  }
  await loadMembers(r); // after a refusal too: the list may be out of date
}

// I leave the group: it goes from my list at once (my /v1/sync reports it later as well).
async function leaveGroup(r) {
  const g = groups.get(r.groupId);
  const name = g ? g.name : `Group #${r.groupId}`;
  membersSaid('', '');
  try {
    await api('DELETE', `/v1/groups/${r.groupId}/members/${encodeURIComponent(session.user)}`);
  } catch (e) {
    if (roster === r && e.status !== 401) membersSaid('', `Could not leave: ${e.message}`);
    return;
  }
  if (groups.delete(r.groupId)) setTotalUnread(totalUnread - (g.unread_count || 0));
  if (open && open.id === r.groupId) closeGroup();
  closeMembers();
  renderGroups();
  showNotice(`You left “${name}”.`);
}

// ---------------------------------------------------------------- wiring

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const token = $('login-token').value.trim();
  if (token) {
    const user = tokenSubject(token);
    if (!user) { showError($('login-error'), 'That does not look like a Chorus token.'); return; }
    startSession(user, token);
    return;
  }
  const user = $('login-user').value.trim();
  if (!user) { showError($('login-error'), 'Enter a user id, e.g. alice.'); return; }
  pickUser(user);
});

$('logout').addEventListener('click', () => signOut(''));
$('chat-notice-close').addEventListener('click', () => showNotice(''));
$('chat-back').addEventListener('click', backToList);
window.addEventListener('popstate', onPopState);

$('members-open').addEventListener('click', openMembers);
$('members').addEventListener('close', () => { roster = null; });
$('members-more').addEventListener('click', () => { if (roster) loadMembers(roster, true); });
$('add-members').addEventListener('submit', (ev) => {
  ev.preventDefault();
  if (roster) addMembers(roster, $('add-members-input').value);
});
$('rename').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const name = $('rename-input').value.trim();
  if (roster && name) renameGroup(roster, name);
});
$('leave-start').addEventListener('click', () => {
  $('leave-question').textContent = `Leave “${$('chat-title').textContent}”? You will stop getting its messages.`;
  $('leave-confirm').hidden = false;
  $('leave-yes').focus();
});
$('leave-no').addEventListener('click', () => { $('leave-confirm').hidden = true; });
$('leave-yes').addEventListener('click', () => { if (roster) leaveGroup(roster); });

$('new-group').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const name = $('new-group-name').value.trim();
  const members = parseUserIds($('new-group-members').value);
  if (members.error) {
    showError($('new-group-error'), members.error);
    $('new-group-members').focus();
    return;
  }
  if (name) createGroup(name, members.ids);
});

$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const input = $('composer-input');
  const content = input.value;
  if (!content.trim()) return;
  if (new TextEncoder().encode(content).length > 16384) {
    showError($('chat-error'), 'A message holds at most 16384 bytes.');
    return;
  }
  if (!open) return;
  const extras = composeMentions(open, content);
  if (extras.error) { showError($('chat-error'), extras.error); return; }
  if (replyingTo && replyingTo.groupId === open.id) extras.reply_to_msg_id = replyingTo.msgId;
  showError($('chat-error'), '');
  input.value = '';
  setReplyTo(null);
  sendMessage(content, extras);
});

$('reply-cancel').addEventListener('click', () => { setReplyTo(null); $('composer-input').focus(); });

$('composer-input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
  if (ev.key === 'Escape' && replyingTo) setReplyTo(null);
});

$('load-older').addEventListener('click', loadOlder);

// Phones have no Shift+Enter to speak of: the hint fits the screen.
function fitComposerHint() {
  $('composer-input').placeholder = NARROW.matches
    ? 'Write a message'
    : 'Write a message — Enter sends, Shift+Enter for a new line';
}
NARROW.addEventListener('change', fitComposerHint);
fitComposerHint();

document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'visible') scheduleAck();
});

(function resume() {
  try {
    const saved = JSON.parse(sessionStorage.getItem(STORAGE_KEY) || 'null');
    if (saved && saved.user && saved.token) { startSession(saved.user, saved.token); return; }
  } catch { /* ignore a damaged entry */ }
  signOut('');
})();
