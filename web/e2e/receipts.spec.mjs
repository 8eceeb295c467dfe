// Browser end-to-end test of the reference web client: two users in browser contexts of their
// own, a group created through the UI, a message, live read receipts and a live reply; then the
// chat list: last-message previews, most recent activity first, the total unread badge (also
// on bob's second device) and a group bob was removed from.
//
// Needs a Chorus server in development mode at CHORUS_URL (see .ci/browser-test) and Debian's
// Chromium at CHORUS_CHROMIUM (default /usr/bin/chromium). Run: node --test receipts.spec.mjs
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { chromium } from 'playwright-core';

const BASE = process.env.CHORUS_URL || 'http://127.0.0.1:8080';
const CHROMIUM = process.env.CHORUS_CHROMIUM || '/usr/bin/chromium';
const ARTIFACTS = process.env.CHORUS_ARTIFACTS_DIR || '/tmp/chorus-artifacts';
const LIVE_MS = 5000; // how long a live update may take to show up

const GROUP_NAME = 'Launch <b>crew</b>';
const HELLO = 'Hello Bob <img src=x onerror="window.__xss=1"> & welcome!';
const REPLY = 'Hi Alice, got it 👍';
const OLDER = 'Design review';
const NEWER = 'Standup';
const QUICK = 'One more thing for the crew';
// Longer than a preview (120 characters); the emoji is one character but two UTF-16 units.
const LONG = 'Agenda 🎉 ' + 'the plan for next week, item by item, with owners; '.repeat(4);
const LONG_PREVIEW = Array.from(LONG).slice(0, 120).join('') + '…';

// Retries `check` (which throws while it is not yet true) until it passes or `ms` ran out.
async function eventually(check, ms = LIVE_MS) {
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
function groupEntry(page, name) {
  return page.getByTestId('group').filter({ has: page.getByTestId('group-name').getByText(name, { exact: true }) });
}

async function groupNames(page) {
  return page.getByTestId('groups').getByTestId('group-name').allTextContents();
}

// What the header badge and the title say about unread messages ('' when none).
async function totalUnread(page) {
  const { shown, title } = await page.evaluate(() => {
    const badge = document.querySelector('[data-testid="total-unread"]');
    return { shown: badge.checkVisibility() ? badge.textContent : '', title: document.title };
  });
  assert.equal(title, shown ? `(${shown}) Chorus` : 'Chorus', 'the title follows the badge');
  return shown;
}

test('receipts, replies and the chat list show up live in the other browser', { timeout: 90_000 }, async (t) => {
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  t.after(() => browser.close());
  const problems = [];

  async function signIn(user) {
    const context = await browser.newContext({ viewport: { width: 1100, height: 680 } });
    const page = await context.newPage();
    page.setDefaultTimeout(10_000);
    page.on('pageerror', (e) => problems.push(`${user}: page error: ${e.message}`));
    page.on('console', (m) => { if (m.type() === 'error') problems.push(`${user}: console: ${m.text()}`); });
    await page.goto(BASE);
    await page.getByTestId('login-user').fill(user);
    await page.getByTestId('login-submit').click();
    await page.getByTestId('me').filter({ hasText: user }).waitFor();
    await page.locator('[data-testid="status"][data-state="live"]').waitFor({ timeout: LIVE_MS });
    await page.evaluate(() => { window.__notReloaded = true; });
    return page;
  }

  const alice = await signIn('alice');

  await t.test('alice creates a group with bob through the form and sends a message', async () => {
    await alice.getByTestId('new-group-name').fill(GROUP_NAME);
    await alice.getByTestId('new-group-members').fill('bob');
    await alice.getByTestId('new-group-submit').click();
    await alice.getByTestId('chat-title').filter({ hasText: GROUP_NAME }).waitFor();
    await alice.getByTestId('composer-input').fill(HELLO);
    await alice.getByTestId('composer-input').press('Enter');
    const mine = alice.locator('[data-testid="message"][data-sender="alice"]');
    await mine.getByTestId('receipt').filter({ hasText: 'read by 0 · unread 1' }).waitFor({ timeout: LIVE_MS });
    assert.equal(await mine.getByTestId('message-content').textContent(), HELLO);
  });

  const bob = await signIn('bob');

  await t.test('bob sees the group with one unread message and its preview, opens it and sees the message', async () => {
    const group = bob.getByTestId('group').filter({ hasText: GROUP_NAME });
    await group.waitFor();
    assert.equal(await group.getByTestId('group-name').textContent(), GROUP_NAME);
    assert.equal(await group.getByTestId('unread-badge').textContent(), '1');
    assert.equal(await group.getByTestId('group-preview').textContent(), `alice: ${HELLO}`);
    assert.equal(await totalUnread(bob), '1');
    await group.click();
    const hello = bob.locator('[data-testid="message"][data-sender="alice"]');
    await hello.getByTestId('message-content').filter({ hasText: 'Hello Bob' }).waitFor();
    assert.equal(await hello.getByTestId('message-content').textContent(), HELLO);
    assert.equal(await hello.getByTestId('receipt').count(), 0, 'receipts only under own messages');
    await eventually(async () => assert.equal(await totalUnread(bob), ''));
  });

  await t.test('alice sees "read by 1 · unread 0" without reloading', async () => {
    const started = Date.now();
    await alice.getByTestId('receipt').filter({ hasText: 'read by 1 · unread 0' }).waitFor({ timeout: LIVE_MS });
    t.diagnostic(`receipt update shown after ${Date.now() - started} ms`);
    assert.equal(await alice.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const shot = path.join(ARTIFACTS, 'browser-receipts.png');
    await alice.screenshot({ path: shot });
    console.log(`screenshot: ${shot}`);
  });

  await t.test('clicking the receipt line lists bob among the readers', async () => {
    await alice.getByTestId('receipt').click();
    const dialog = alice.getByTestId('who-read');
    await dialog.getByTestId('who-read-read').getByTestId('who-read-user').filter({ hasText: 'bob' }).waitFor();
    assert.deepEqual(await dialog.getByTestId('who-read-read').getByTestId('who-read-user').allTextContents(), ['bob']);
    assert.equal(await dialog.getByTestId('who-read-unread').getByTestId('who-read-user').count(), 0);
    await alice.screenshot({ path: path.join(ARTIFACTS, 'browser-who-read.png') });
    await dialog.getByTestId('who-read-close').click();
    await dialog.waitFor({ state: 'hidden' });
  });

  await t.test('bob replies; alice sees it arrive live and reads it', async () => {
    await bob.getByTestId('composer-input').fill(REPLY);
    await bob.getByTestId('composer-send').click();
    const reply = alice.locator('[data-testid="message"][data-sender="bob"]');
    await reply.getByTestId('message-content').filter({ hasText: REPLY }).waitFor({ timeout: LIVE_MS });
    assert.equal(await reply.getByTestId('message-sender').textContent(), 'bob');
    // alice's client acks what it shows, so bob's receipt turns to read as well.
    await bob.locator('[data-testid="message"][data-sender="bob"]').getByTestId('receipt')
      .filter({ hasText: 'read by 1 · unread 0' }).waitFor({ timeout: LIVE_MS });
    assert.equal(await alice.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
  });

  await t.test('the groups alice creates show up in bob\'s list, newest first', async () => {
    for (const name of [OLDER, NEWER]) {
      await alice.getByTestId('new-group-name').fill(name);
      await alice.getByTestId('new-group-members').fill('bob');
      await alice.getByTestId('new-group-submit').click();
      await alice.getByTestId('chat-title').filter({ hasText: name }).waitFor();
    }
    await eventually(async () => assert.deepEqual(await groupNames(bob), [NEWER, OLDER, GROUP_NAME]));
    assert.deepEqual(await groupNames(alice), [NEWER, OLDER, GROUP_NAME]);
    assert.equal(await groupEntry(bob, NEWER).getByTestId('group-preview').textContent(), 'No messages yet');
    assert.equal(await groupEntry(bob, GROUP_NAME).getByTestId('group-preview').textContent(), `bob: ${REPLY}`);
    await groupEntry(bob, NEWER).click(); // so that no group bob is sent to is open
    await bob.getByTestId('chat-title').filter({ hasText: NEWER }).waitFor();
  });

  let bobPhone;
  await t.test('a message moves its group to the top of bob\'s list, with its preview and unread count', async () => {
    bobPhone = await signIn('bob'); // a second browser: another device of bob's
    assert.deepEqual(await groupNames(bobPhone), [NEWER, OLDER, GROUP_NAME]);
    assert.equal(await totalUnread(bobPhone), '');

    await groupEntry(alice, GROUP_NAME).click();
    await alice.getByTestId('chat-title').filter({ hasText: GROUP_NAME }).waitFor();
    await alice.getByTestId('composer-input').fill(QUICK);
    await alice.getByTestId('composer-input').press('Enter');
    await eventually(async () => assert.deepEqual(await groupNames(bob), [GROUP_NAME, NEWER, OLDER]));
    assert.equal(await groupEntry(bob, GROUP_NAME).getByTestId('group-preview').textContent(), `alice: ${QUICK}`);
    await eventually(async () => assert.equal(await totalUnread(bob), '1'));

    // Then the older of the two new groups: it goes to the top, its preview cut with an ellipsis.
    await groupEntry(alice, OLDER).click();
    await alice.getByTestId('chat-title').filter({ hasText: OLDER }).waitFor();
    await alice.getByTestId('composer-input').fill(LONG);
    await alice.getByTestId('composer-input').press('Enter');
    for (const page of [bob, bobPhone, alice]) {
      await eventually(async () => assert.deepEqual(await groupNames(page), [OLDER, GROUP_NAME, NEWER]));
      await eventually(async () => assert.equal(
        await groupEntry(page, OLDER).getByTestId('group-preview').textContent(), `alice: ${LONG_PREVIEW}`));
    }
    for (const page of [bob, bobPhone]) {
      await eventually(async () => assert.equal(await totalUnread(page), '2'));
      assert.equal(await groupEntry(page, OLDER).getByTestId('unread-badge').textContent(), '1');
      assert.equal(await groupEntry(page, GROUP_NAME).getByTestId('unread-badge').textContent(), '1');
    }
    assert.equal(await totalUnread(alice), '', 'own messages are never unread');
    await bob.screenshot({ path: path.join(ARTIFACTS, 'browser-chat-list.png') });
  });

  await t.test('reading clears the total badge, on bob\'s other device too', async () => {
    await groupEntry(bob, OLDER).click();
    await bob.locator('[data-testid="message"][data-sender="alice"]').getByTestId('message-content')
      .filter({ hasText: 'Agenda' }).waitFor();
    for (const page of [bob, bobPhone]) await eventually(async () => assert.equal(await totalUnread(page), '1'));
    assert.equal(await groupEntry(bobPhone, OLDER).getByTestId('unread-badge').isVisible(), false);
    await groupEntry(bob, GROUP_NAME).click();
    await bob.locator('[data-testid="message"][data-sender="alice"]').getByTestId('message-content')
      .filter({ hasText: QUICK }).waitFor();
    for (const page of [bob, bobPhone]) await eventually(async () => assert.equal(await totalUnread(page), ''));
    assert.equal(await groupEntry(bobPhone, GROUP_NAME).getByTestId('unread-badge').isVisible(), false);
    assert.equal(await bob.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
  });

  await t.test('a group bob is removed from leaves his list and closes if open', async () => {
    await groupEntry(bob, NEWER).click();
    await bob.getByTestId('chat-title').filter({ hasText: NEWER }).waitFor();
    // Loaded first: a request still under way when bob is removed would be refused (403).
    await bob.locator('[data-testid="chat"][data-state="ready"]').waitFor();
    const status = await alice.evaluate(async (name) => {
      const { token } = JSON.parse(sessionStorage.getItem('chorus.session'));
      const headers = { Authorization: `Bearer ${token}` };
      const list = await (await fetch('/v1/me/groups', { headers })).json();
      const group = list.groups.find((g) => g.name === name);
      return (await fetch(`/v1/groups/${group.group_id}/members/bob`, { method: 'DELETE', headers })).status;
    }, NEWER);
    assert.equal(status, 204);
    await bob.getByTestId('chat-notice').filter({ hasText: `no longer a member of “${NEWER}”` }).waitFor({ timeout: LIVE_MS });
    assert.equal(await bob.getByTestId('chat').isVisible(), false);
    for (const page of [bob, bobPhone]) {
      await eventually(async () => assert.deepEqual(await groupNames(page), [OLDER, GROUP_NAME]));
    }
  });

  await t.test('user content was never parsed as HTML', async () => {
    for (const page of [alice, bob, bobPhone]) {
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.equal(await page.locator('#messages img, #groups img, #groups b, #chat-title b').count(), 0);
    }
  });

  assert.deepEqual(problems, []);
});
