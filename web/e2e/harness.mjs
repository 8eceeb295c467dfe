// What the browser tests of the reference web client share: launching Debian's Chromium,
// signing a user in (in a browser context of their own), waiting for live updates, and reading
// the chat list and the open chat.
//
// Needs a Chorus server in development mode at CHORUS_URL (see .ci/browser-test) and Debian's
// Chromium at CHORUS_CHROMIUM (default /usr/bin/chromium).
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

export const BASE = process.env.CHORUS_URL || 'http://127.0.0.1:8080';
export const ARTIFACTS = process.env.CHORUS_ARTIFACTS_DIR || '/tmp/chorus-artifacts';
export const LIVE_MS = 5000; // how long a live update may take to show up
export const PHONE = { width: 390, height: 844 };
const CHROMIUM = process.env.CHORUS_CHROMIUM || '/usr/bin/chromium';

// A headless Chromium closed when the test `t` ends, and a signIn(user, { phone }) for it.
// Page errors and console errors are collected in `problems`, except the console errors a step
// announced with expectRefusal(user, /pattern/) (a request the server is meant to refuse).
export async function startBrowser(t) {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.after(() => browser.close());
  const problems = [];
  const refusals = new Map(); // user -> console errors a step expects (a refused request)
  const expectRefusal = (user, pattern) => refusals.set(user, [...(refusals.get(user) || []), pattern]);

  async function signIn(user, { phone = false } = {}) {
    const context = await browser.newContext(phone
      ? { viewport: PHONE, deviceScaleFactor: 2, isMobile: true, hasTouch: true }
      : { viewport: { width: 1100, height: 680 } });
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    page.on('pageerror', (e) => problems.push(`${user}: page error: ${e.message}`));
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      const expected = refusals.get(user) || [];
      const i = expected.findIndex((re) => re.test(m.text()));
      if (i >= 0) expected.splice(i, 1);
      else problems.push(`${user}: console: ${m.text()}`);
    });
    await page.goto(BASE);
    await page.getByTestId('login-user').fill(user);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('me').filter({ hasText: user }).waitFor();
    await page.locator('[data-testid="status"][data-state="live"]').waitFor({ timeout: LIVE_MS });
    await page.evaluate(() => { window.__notReloaded = true; });
    return page;
  }

  return { signIn, problems, refusals, expectRefusal };
}

// Retries `check` (which throws while it is not yet true) until it passes or `ms` ran out.
export async function eventually(check, ms = LIVE_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

// The chat-list entry whose name is exactly `name` (the preview is part of the entry's text).
export function groupEntry(page, name) {
  return page.getByTestId('group').filter({ has: page.getByTestId('group-name').getByText(name, { exact: true }) });
}

export async function groupNames(page) {
  return page.getByTestId('groups').getByTestId('group-name').allTextContents();
}

// The open chat's messages as runs of one sender: [[the header's sender, number of messages],
// …]. Only the first message of a run may show its header (sender and time). Lines (system
// lines, recalled messages) are left out; they end a run, so a run after one shows its header.
export async function runs(page) {
  return page.evaluate(() => {
    const out = [];
    for (const li of document.querySelectorAll('#messages > li.msg')) {
      const meta = li.querySelector('.meta');
      const shown = meta.checkVisibility();
      if (shown && meta.querySelector('time') && !meta.querySelector('time').textContent) {
        out.push(['(header without time)', 0]);
      } else if (shown || !out.length) {
        out.push([shown ? meta.querySelector('.sender').textContent : '(no header)', 0]);
      }
      out[out.length - 1][1]++;
    }
    return out;
  });
}

// The open chat from top to bottom: a message as its text, a line (system line, recalled or
// deleted message) as "— its text —".
export async function chatLog(page) {
  return page.evaluate(() => [...document.querySelectorAll('#messages > li')].map((li) => (
    li.classList.contains('line')
      ? `— ${li.textContent} —`
      : li.querySelector('[data-testid="message-content"]')?.textContent ?? '(no text)')));
}

export async function memberIds(page) {
  return page.getByTestId('members-list').getByTestId('member-id').allTextContents();
}

export async function visible(page, testid) {
  return page.getByTestId(testid).isVisible();
}

// What the header badge and the title say about unread messages ('' when none).
export async function totalUnread(page) {
  const { shown, title } = await page.evaluate(() => {
    const badge = document.querySelector('[data-testid="total-unread"]');
    return { shown: badge.checkVisibility() ? badge.textContent : '', title: document.title };
  });
  assert.equal(title, shown ? `(${shown}) Chorus` : 'Chorus', 'the title follows the badge');
  return shown;
}
