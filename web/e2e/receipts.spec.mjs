// Browser end-to-end test of the reference web client: two users in two browser contexts,
// a group created through the UI, a message, live read receipts and a live reply.
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

test('receipts and replies show up live in the other browser', { timeout: 90_000 }, async (t) => {
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

  await t.test('bob sees the group with one unread message, opens it and sees the message', async () => {
    const group = bob.getByTestId('group').filter({ hasText: GROUP_NAME });
    await group.waitFor();
    assert.equal(await group.getByTestId('group-name').textContent(), GROUP_NAME);
    assert.equal(await group.getByTestId('unread-badge').textContent(), '1');
    await group.click();
    const hello = bob.locator('[data-testid="message"][data-sender="alice"]');
    await hello.getByTestId('message-content').filter({ hasText: 'Hello Bob' }).waitFor();
    assert.equal(await hello.getByTestId('message-content').textContent(), HELLO);
    assert.equal(await hello.getByTestId('receipt').count(), 0, 'receipts only under own messages');
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

  await t.test('user content was never parsed as HTML', async () => {
    for (const page of [alice, bob]) {
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.equal(await page.locator('#messages img, #groups b, #chat-title b').count(), 0);
    }
  });

  assert.deepEqual(problems, []);
});
