// Chorus reference web client: plain JavaScript, no build step, no dependencies.
//
// How it talks to the server (see README.md and openapi.yaml):
// - A user is picked with POST /v1/dev/token (development mode only); the token stays in
//   sessionStorage for this tab.
// - Two long-poll loops run while signed in: GET /v1/sync (which groups received messages)
//   and GET /v1/receipts (read counts of my messages changed). Each starts without a cursor,
//   reads the current state, then polls with the cursor it was given.
// - The open group's messages are kept in a Map by msg_id (deduplication); new ones are
//   pulled with after_msg_id = the highest shown, and the highest shown is acked.
// - User content only ever reaches the page through textContent, never innerHTML.
'use strict';

const POLL_TIMEOUT_S = 25;
const POLL_HTTP_TIMEOUT_MS = (POLL_TIMEOUT_S + 15) * 1000; // above timeout_s, as the spec asks
const REQUEST_TIMEOUT_MS = 15000;
const HISTORY_PAGE = 50;
const PULL_PAGE = 200;
const SEND_ATTEMPTS = 6;
const STORAGE_KEY = 'chorus.session';

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- state

let session = null; // { user, token, alive, stop: AbortController }
const groups = new Map(); // group_id -> MyGroup (name, last_msg_id, cursors, unread_count)
const receipts = new Map(); // "group/msg" -> { read_count, unread_count, delivered_count }
let open = null; // the open group: { id, messages: Map(msg_id -> el), highest, oldest, ... }
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
    signOut('Your session is no longer valid (the token expired or the server changed). Pick a user again.');
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

function showError(node, message) {
  node.textContent = message || '';
  node.hidden = !message;
}

const timeFmt = new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' });
const dayTimeFmt = new Intl.DateTimeFormat(undefined, {
  month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit',
});
function formatTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  return (d.toDateString() === new Date().toDateString() ? timeFmt : dayTimeFmt).format(d);
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
    const { token } = await api('POST', '/v1/dev/token', { body: { user_id: userId }, auth: false });
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
  session = { user, token, alive: true, stop: new AbortController(), polls: {} };
  groups.clear();
  receipts.clear();
  closeGroup();
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

// GET /v1/sync: which of my groups received messages. Without a cursor it answers at once;
// the state is (re)read after taking that cursor, so nothing falls in between.
async function syncLoop(sess) {
  let cursor = null;
  for (let attempt = 0; sess.alive;) {
    try {
      const page = await poll(sess, 'sync', '/v1/sync', cursor);
      if (!sess.alive) return;
      if (cursor === null) await reloadState(sess);
      cursor = page.cursor;
      for (const g of page.groups) groupReported(g);
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

async function reloadState(sess) {
  const fresh = [];
  let cursor = null;
  do {
    const q = cursor ? `?limit=200&cursor=${encodeURIComponent(cursor)}` : '?limit=200';
    const page = await api('GET', `/v1/me/groups${q}`);
    fresh.push(...page.groups);
    cursor = page.has_more ? page.next_cursor : null;
  } while (cursor && sess.alive);
  if (!sess.alive) return;
  groups.clear();
  for (const g of fresh) groups.set(g.group_id, g);
  renderGroups();
  if (open) {
    if (groups.has(open.id)) await openGroup(open.id);
    else closeGroup();
  }
}

// A group reported by /v1/sync, with current values.
function groupReported(g) {
  groups.set(g.group_id, { ...groups.get(g.group_id), ...g });
  renderGroups();
  if (open && open.id === g.group_id) pullNew();
}

// ---------------------------------------------------------------- groups

function renderGroups() {
  const list = $('groups');
  const items = [...groups.values()].sort((a, b) => a.group_id - b.group_id).map((g) => {
    const isOpen = open && open.id === g.group_id;
    const badge = el('span', { className: 'badge', testid: 'unread-badge', text: String(g.unread_count) });
    badge.hidden = isOpen || !(g.unread_count > 0);
    const button = el('button', {
      type: 'button', className: 'group' + (isOpen ? ' active' : ''), testid: 'group',
      title: `Group #${g.group_id}`,
    }, el('span', { className: 'name', testid: 'group-name', text: g.name }), badge);
    button.dataset.groupId = g.group_id;
    button.addEventListener('click', () => openGroup(g.group_id));
    return el('li', {}, button);
  });
  list.replaceChildren(...items);
  $('groups-empty').hidden = groups.size > 0 || !session;
}

async function createGroup(name, memberIds) {
  const error = $('new-group-error');
  showError(error, '');
  try {
    const g = await api('POST', '/v1/groups', { body: { name, member_ids: memberIds } });
    groups.set(g.group_id, {
      group_id: g.group_id, name: g.name, last_msg_id: g.last_msg_id,
      last_ack_msg_id: g.last_msg_id, last_read_msg_id: g.last_msg_id, unread_count: 0,
    });
    $('new-group').reset();
    kickPolls();
    await openGroup(g.group_id);
    $('composer-input').focus();
  } catch (e) {
    if (e.status !== 401) showError(error, e.message);
  }
}

// ---------------------------------------------------------------- the open group

function closeGroup() {
  open = null;
  $('chat').hidden = true;
  $('chat-empty').hidden = false;
  $('messages').replaceChildren();
}

async function openGroup(groupId) {
  const sess = session;
  const o = {
    id: groupId, messages: new Map(), pending: new Map(), highest: 0, oldest: null,
    loaded: false, pulling: false, again: false,
  };
  open = o;
  const g = groups.get(groupId);
  $('chat-title').textContent = g ? g.name : `Group #${groupId}`;
  $('chat-sub').textContent = '';
  $('messages').replaceChildren();
  $('load-older').hidden = true;
  showError($('chat-error'), '');
  $('chat-empty').hidden = true;
  $('chat').hidden = false;
  renderGroups();
  try {
    const info = await withRetry(() => api('GET', `/v1/groups/${groupId}`), sess);
    if (open !== o) return;
    $('chat-title').textContent = info.name;
    $('chat-sub').textContent = `#${info.group_id} · ${info.member_count} member${info.member_count === 1 ? '' : 's'} · owner ${info.owner_id}`;
    const page = await withRetry(() => api('GET',
      `/v1/groups/${groupId}/messages?before_msg_id=${info.last_msg_id + 1}&limit=${HISTORY_PAGE}&with_receipts=true`), sess);
    if (open !== o) return;
    addMessages(o, page.messages);
    $('load-older').hidden = !page.has_more;
    scrollToBottom();
    o.loaded = true;
    await pullNew(); // anything sent while the history loaded
  } catch (e) {
    if (open === o && sess.alive && e.status !== 401) showError($('chat-error'), `Could not load this group: ${e.message}`);
  }
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

// Adds messages (deduplicated by msg_id) in msg_id order, before any still-pending sends.
function addMessages(o, list) {
  if (!session) return;
  const stick = isNearBottom();
  let mine = false;
  const ol = $('messages');
  for (const m of list) {
    if (m.receipt) setReceipt(m.group_id, m.msg_id, m.receipt, false);
    if (o.messages.has(m.msg_id)) continue;
    const node = renderMessage(m);
    o.messages.set(m.msg_id, node);
    const pending = m.sender_id === session.user && o.pending.get(m.client_msg_id);
    if (pending) { pending.remove(); o.pending.delete(m.client_msg_id); mine = true; }
    const next = [...ol.children].find((c) => c.dataset.pending || Number(c.dataset.msgId) > m.msg_id);
    ol.insertBefore(node, next || null);
    o.highest = Math.max(o.highest, m.msg_id);
    o.oldest = o.oldest === null ? m.msg_id : Math.min(o.oldest, m.msg_id);
  }
  if (stick || mine) scrollToBottom();
}

function renderMessage(m) {
  const own = session && m.sender_id === session.user;
  const li = el('li', { className: 'msg' + (own ? ' own' : ''), testid: 'message' },
    el('div', { className: 'meta' },
      el('span', { className: 'sender', testid: 'message-sender', text: own ? 'you' : m.sender_id }),
      el('time', { dateTime: m.created_at, title: m.created_at, text: formatTime(m.created_at) })),
    el('div', { className: 'content', testid: 'message-content', text: m.content }));
  li.dataset.msgId = m.msg_id;
  li.dataset.sender = m.sender_id;
  if (own) {
    const line = el('button', { type: 'button', className: 'receipt', testid: 'receipt', title: 'Who has read it?' });
    line.addEventListener('click', () => showWhoRead(m.group_id, m.msg_id));
    li.append(line);
    paintReceipt(li, receipts.get(`${m.group_id}/${m.msg_id}`));
  }
  return li;
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
  const node = open && open.id === groupId && open.messages.get(msgId);
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

function sendMessage(content) {
  const o = open;
  if (!o) return;
  const clientMsgId = newClientMsgId(); // one per message, reused by every retry
  const node = el('li', { className: 'msg own pending', testid: 'message-pending' },
    el('div', { className: 'meta' }, el('span', { className: 'sender', text: 'you' })),
    el('div', { className: 'content', testid: 'message-content', text: content }),
    el('div', { className: 'receipt state', testid: 'send-state', text: 'sending…' }));
  node.dataset.pending = '1';
  o.pending.set(clientMsgId, node);
  $('messages').append(node);
  scrollToBottom();
  deliver(o, session, clientMsgId, content, node);
}

async function deliver(o, sess, clientMsgId, content, node) {
  const state = node.querySelector('.state');
  state.replaceChildren('sending…');
  for (let attempt = 0; sess.alive; attempt++) {
    try {
      const msg = await api('POST', `/v1/groups/${o.id}/messages`,
        { body: { client_msg_id: clientMsgId, content } });
      const g = groups.get(o.id);
      if (g) {
        // Sending moves the sender's own cursors to the new message.
        g.last_msg_id = Math.max(g.last_msg_id, msg.msg_id);
        g.last_ack_msg_id = Math.max(g.last_ack_msg_id, msg.msg_id);
        g.last_read_msg_id = Math.max(g.last_read_msg_id, msg.msg_id);
        g.unread_count = g.last_msg_id - g.last_read_msg_id;
      }
      if (open === o) {
        addMessages(o, [msg]);
        fetchReceipt(o, msg.msg_id);
      }
      return;
    } catch (e) {
      if (!sess.alive || e.status === 401) return;
      if (!retriable(e) || attempt + 1 >= SEND_ATTEMPTS) {
        const retry = el('button', { type: 'button', className: 'link', testid: 'send-retry', text: 'retry' });
        retry.addEventListener('click', () => deliver(o, sess, clientMsgId, content, node));
        state.replaceChildren(`not sent: ${e.message} `, retry);
        node.classList.add('failed');
        return;
      }
      state.replaceChildren(`sending… (retry ${attempt + 1})`);
      await sleep(backoff(e, attempt), sess);
    }
  }
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

$('new-group').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const name = $('new-group-name').value.trim();
  const members = $('new-group-members').value.split(/[\s,]+/).filter(Boolean);
  if (name) createGroup(name, members);
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
  showError($('chat-error'), '');
  input.value = '';
  sendMessage(content);
});

$('composer-input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    $('composer').requestSubmit();
  }
});

$('load-older').addEventListener('click', loadOlder);

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
