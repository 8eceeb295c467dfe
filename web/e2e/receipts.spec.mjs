// Browser end-to-end test of the reference web client: two users in browser contexts of their
// own, a group created through the UI, a message, live read receipts and a live reply; then the
// chat list: last-message previews, most recent activity first, the total unread badge (also
// on bob's second device) and a group bob was removed from; then messages grouped by sender,
// members (listed by all, added and removed by the owner, a member leaving), user ids checked
// before sending, and the phone layout (carol on a 390x844 screen): list first, a chat
// full-screen, back to the list.
//
// Needs a Chorus server in development mode at CHORUS_URL (see .ci/browser-test) and Debian's
// Chromium at CHORUS_CHROMIUM (default /usr/bin/chromium). Run: node --test receipts.spec.mjs
// (the helpers it shares with the other specs are in harness.mjs)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import {
  ARTIFACTS, LIVE_MS, PHONE, startBrowser, eventually, groupEntry, groupNames, runs, memberIds, visible, totalUnread,
} from './harness.mjs';

const GROUP_NAME = 'Launch <b>crew</b>';
const HELLO = 'Hello Bob <img src=x onerror="window.__xss=1"> & welcome!';
const REPLY = 'Hi Alice, got it 👍';
const OLDER = 'Design review';
const NEWER = 'Standup';
const QUICK = 'One more thing for the crew';
// Longer than a preview (120 characters); the emoji is one character but two UTF-16 units.
const LONG = 'Agenda 🎉 ' + 'the plan for next week, item by item, with owners; '.repeat(4);
const LONG_PREVIEW = Array.from(LONG).slice(0, 120).join('') + '…';
const TRIP = 'Field trip';
const RUN = ['Bus leaves at 8', 'Bring lunch', 'And a raincoat'];
const BOB_RUN = ['Count me in', 'I will bring snacks'];
const WELCOME = ['Welcome, Carol!', 'We meet at the gate'];

test('receipts, replies and the chat list show up live in the other browser', { timeout: 90_000 }, async (t) => {
  const { signIn, problems, refusals, expectRefusal } = await startBrowser(t);

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
    // Sent moments ago: the chat shows the time of day (hh:mm in the browser's locale).
    assert.match(await group.getByTestId('group-time').textContent(), /^\d{1,2}:\d{2}/);
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
      // The composer has the focus as soon as the chat shows, not once its history loaded
      // (typing the next group's name at once must not end up in the composer).
      assert.equal(await alice.evaluate(() => document.activeElement?.dataset.testid), 'composer-input');
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

  await t.test('a bad id in the members field is named and nothing is sent; then the group is created', async () => {
    await alice.getByTestId('new-group-name').fill(TRIP);
    await alice.getByTestId('new-group-members').fill('bob,  carol#1 x\u200b');
    await alice.getByTestId('new-group-submit').click();
    const error = alice.getByTestId('new-group-error');
    await error.waitFor();
    assert.equal(await error.textContent(), 'Not valid user ids: “carol#1” (“#” not allowed); “x\u200b” (U+200B not allowed). ' +
      'A user id is 1-64 characters from A-Z a-z 0-9 . _ @ : -.');
    assert.equal((await groupNames(alice)).includes(TRIP), false, 'no group was created');
    await alice.getByTestId('new-group-members').fill('x'.repeat(65));
    await alice.getByTestId('new-group-submit').click();
    await error.filter({ hasText: '(65 characters, at most 64)' }).waitFor();
    await alice.getByTestId('new-group-members').fill(' bob , ');
    await alice.getByTestId('new-group-submit').click();
    await alice.getByTestId('chat-title').filter({ hasText: TRIP }).waitFor();
    assert.equal(await error.isVisible(), false);
    await alice.getByTestId('chat-sub').filter({ hasText: '· 2 members ·' }).waitFor();
  });

  await t.test('consecutive messages of one sender show the sender and time once', async () => {
    for (const text of RUN) {
      await alice.getByTestId('composer-input').fill(text);
      await alice.getByTestId('composer-input').press('Enter');
    }
    await eventually(async () => assert.deepEqual(await runs(alice), [['you', 3]]));
    await groupEntry(bob, TRIP).click();
    await bob.getByTestId('chat-title').filter({ hasText: TRIP }).waitFor();
    await eventually(async () => assert.deepEqual(await runs(bob), [['alice', 3]]));
    for (const text of BOB_RUN) {
      await bob.getByTestId('composer-input').fill(text);
      await bob.getByTestId('composer-input').press('Enter');
    }
    await eventually(async () => assert.deepEqual(await runs(bob), [['alice', 3], ['you', 2]]));
    await eventually(async () => assert.deepEqual(await runs(alice), [['you', 3], ['bob', 2]]));
    // Written quickly one after another, they still arrive in the order they were written.
    assert.deepEqual(await alice.getByTestId('message-content').allTextContents(), [...RUN, ...BOB_RUN]);
    // Each own message keeps its receipt line.
    await eventually(async () => assert.deepEqual(
      await alice.locator('[data-testid="message"][data-sender="alice"]').getByTestId('receipt').allTextContents(),
      Array(3).fill('read by 1 · unread 0')));
  });

  let carol;
  await t.test('members: bob (a member) sees them; alice (the owner) adds carol and dave, then removes dave', async () => {
    carol = await signIn('carol', { phone: true });
    assert.deepEqual(await groupNames(carol), []);

    await bob.getByTestId('members-open').click();
    await eventually(async () => assert.deepEqual(await memberIds(bob), ['alice', 'bob']));
    assert.equal(await bob.getByTestId('member-remove').count(), 0, 'only the owner removes others');
    assert.equal(await visible(bob, 'add-members-form'), false, 'only the owner adds');
    assert.equal(await visible(bob, 'leave-group'), true);
    await bob.getByTestId('members-close').click();
    await bob.getByTestId('members').waitFor({ state: 'hidden' });

    await alice.getByTestId('members-open').click();
    await eventually(async () => assert.deepEqual(await memberIds(alice), ['alice', 'bob']));
    assert.equal(await visible(alice, 'leave-group'), false, 'the owner cannot leave');
    await alice.getByTestId('add-members-input').fill('carol dave,bad/id');
    await alice.getByTestId('add-members-submit').click();
    await alice.getByTestId('members-error')
      .filter({ hasText: 'Not a valid user id: “bad/id” (“/” not allowed).' }).waitFor();
    assert.deepEqual(await memberIds(alice), ['alice', 'bob'], 'nothing was sent');
    await alice.getByTestId('add-members-input').fill('carol, dave bob');
    await alice.getByTestId('add-members-submit').click();
    await alice.getByTestId('members-info')
      .filter({ hasText: 'Added carol, dave. bob was already in the group.' }).waitFor();
    await eventually(async () => assert.deepEqual(await memberIds(alice), ['alice', 'bob', 'carol', 'dave']));
    assert.equal(await visible(alice, 'members-error'), false);
    assert.match(await alice.getByTestId('chat-sub').textContent(), /· 4 members ·/);
    // carol, signed in on her phone, sees the group she was added to appear.
    await eventually(async () => assert.deepEqual(await groupNames(carol), [TRIP]));

    await alice.getByTestId('member').filter({ hasText: 'dave' }).getByTestId('member-remove').click();
    await alice.getByTestId('members-info').filter({ hasText: 'Removed dave.' }).waitFor();
    await eventually(async () => assert.deepEqual(await memberIds(alice), ['alice', 'bob', 'carol']));
    assert.match(await alice.getByTestId('chat-sub').textContent(), /· 3 members ·/);
    await alice.screenshot({ path: path.join(ARTIFACTS, 'browser-members.png') });
    await alice.getByTestId('members-close').click();
    for (const text of WELCOME) {
      await alice.getByTestId('composer-input').fill(text);
      await alice.getByTestId('composer-input').press('Enter');
    }
    await eventually(async () => assert.deepEqual(await runs(alice), [['you', 3], ['bob', 2], ['you', 2]]));
  });

  await t.test('on a phone: the list first, a group opens full-screen, back returns to the list', async () => {
    assert.equal(await carol.getByTestId('me').textContent(), 'carol', 'who is signed in shows on a phone');
    assert.equal(await visible(carol, 'logout'), true);
    assert.equal(await visible(carol, 'groups'), true);
    assert.equal(await visible(carol, 'new-group-form'), true);
    assert.equal(await carol.locator('main.chat').isVisible(), false, 'no chat under the list');
    assert.doesNotMatch(await carol.locator('body').innerText(), /on the left/i);
    // The desktop layout keeps both columns and has no back button.
    assert.equal(await visible(alice, 'groups'), true);
    assert.equal(await visible(alice, 'chat'), true);
    assert.equal(await visible(alice, 'chat-back'), false);

    await groupEntry(carol, TRIP).click();
    await carol.getByTestId('chat-title').filter({ hasText: TRIP }).waitFor();
    assert.equal(await visible(carol, 'groups'), false, 'the chat covers the list');
    assert.equal(await visible(carol, 'chat-back'), true);
    assert.equal(await visible(carol, 'composer-input'), true);
    assert.equal(await visible(carol, 'me'), true);
    // carol joined after the earlier messages: she sees alice's welcome, as one run.
    await eventually(async () => assert.deepEqual(await runs(carol), [['alice', 2]]));
    await carol.getByTestId('composer-input').fill('On my way');
    await carol.getByTestId('composer-send').click();
    await carol.getByTestId('receipt').filter({ hasText: /read by \d · unread \d/ }).waitFor({ timeout: LIVE_MS });
    assert.deepEqual(await runs(carol), [['alice', 2], ['you', 1]]);
    await eventually(async () => assert.equal(await totalUnread(carol), '')); // read on the phone
    const wide = await carol.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(wide <= PHONE.width, `the page is ${wide} px wide: it scrolls sideways`);
    const shot = path.join(ARTIFACTS, 'browser-mobile.png');
    await carol.screenshot({ path: shot });
    console.log(`screenshot: ${shot}`);

    await carol.getByTestId('chat-back').click();
    await carol.getByTestId('groups').waitFor();
    assert.equal(await visible(carol, 'chat'), false);
    assert.equal(await carol.locator('main.chat').isVisible(), false);
    // The phone's own back button does the same, without leaving the page.
    await groupEntry(carol, TRIP).click();
    await carol.getByTestId('chat-title').filter({ hasText: TRIP }).waitFor();
    await carol.goBack();
    await carol.getByTestId('groups').waitFor();
    assert.equal(await visible(carol, 'chat'), false);
    assert.equal(await carol.evaluate(() => window.__notReloaded), true, 'the page was reloaded');
    await carol.screenshot({ path: path.join(ARTIFACTS, 'browser-mobile-list.png') });
  });

  await t.test('carol leaves: the group leaves her list; alice\'s stale remove is refused with the server\'s reason', async () => {
    await alice.getByTestId('members-open').click();
    await eventually(async () => assert.deepEqual(await memberIds(alice), ['alice', 'bob', 'carol']));

    await groupEntry(carol, TRIP).click();
    await carol.locator('[data-testid="chat"][data-state="ready"]').waitFor();
    await carol.getByTestId('members-open').click();
    await eventually(async () => assert.deepEqual(await memberIds(carol), ['alice', 'bob', 'carol']));
    assert.equal(await carol.getByTestId('member-remove').count(), 0);
    await carol.getByTestId('leave-group').click();
    await carol.getByTestId('leave-confirm').click();
    await carol.getByTestId('chat-notice').filter({ hasText: `You left “${TRIP}”.` }).waitFor();
    assert.equal(await visible(carol, 'members'), false);
    assert.equal(await carol.locator('aside.sidebar').isVisible(), true, 'back on the list');
    assert.equal(await carol.getByText('No groups yet.').isVisible(), true);
    assert.deepEqual(await groupNames(carol), []);

    expectRefusal('alice', /status of 404/);
    await alice.getByTestId('member').filter({ hasText: 'carol' }).getByTestId('member-remove').click();
    await alice.getByTestId('members-error')
      .filter({ hasText: 'Could not remove carol: carol is not a member of this group' }).waitFor();
    await eventually(async () => assert.deepEqual(await memberIds(alice), ['alice', 'bob']));
    assert.match(await alice.getByTestId('chat-sub').textContent(), /· 2 members ·/);
    await alice.getByTestId('members-close').click();
    // Her /v1/sync reported the group as removed by now; it must not come back.
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual(await groupNames(carol), []);
    assert.deepEqual(refusals.get('alice'), [], 'the refusal was seen');
  });

  await t.test('user content was never parsed as HTML', async () => {
    for (const page of [alice, bob, bobPhone, carol]) {
      assert.equal(await page.evaluate(() => window.__xss), undefined);
      assert.equal(await page.locator('#messages img, #groups img, #groups b, #chat-title b').count(), 0);
    }
  });

  assert.deepEqual(problems, []);
});
