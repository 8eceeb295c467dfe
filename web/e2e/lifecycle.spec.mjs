// Browser end-to-end test of messages that change after they are sent (openapi.yaml, "Message
// kinds"): maya (the owner) and noah in a group. A mention gives noah's chat list an @ badge
// and highlights the message; a recall, an edit and a delete reach the other browser in place;
// a reply shows its quote (and "recalled message" once the quoted one is gone); a refused edit
// is explained; adding a member and renaming the group show system lines; a change entry whose
// target a new device has not loaded yet is applied when the target is.
//
// Run by .ci/browser-test (helpers in harness.mjs).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  ARTIFACTS, LIVE_MS, startBrowser, eventually, groupEntry, chatLog, memberIds,
} from './harness.mjs';

const GROUP = 'Lifecycle <i>team</i>';
const RENAMED = 'Lifecycle crew';
const REVIEW = '@noah can you review the draft? cc @zed';
const STANDUP = '@all standup at 10';
const OOPS = 'Oops, wrong chat';
const LUNCH = 'Lunch at 12?';
const LUNCH_EDITED = 'Lunch at 1?';
const ANSWER = 'Works for me';
const RANT = 'Off-topic rant';
const OLD_NEWS = 'Old news';
const FILLERS = 50; // one history page: a new device loads the change entry but not its target

// The message whose text is exactly `text`.
function message(page, text) {
  return page.getByTestId('message')
    .filter({ has: page.getByTestId('message-content').getByText(text, { exact: true }) });
}

async function send(page, text) {
  await page.getByTestId('composer-input').fill(text);
  await page.getByTestId('composer-input').press('Enter');
  await message(page, text).waitFor({ timeout: LIVE_MS });
}

// What the chat list entry of `name` shows: its preview and its two badges ('' when hidden).
async function listEntry(page, name) {
  const entry = groupEntry(page, name);
  const shown = async (testid) => {
    const badge = entry.getByTestId(testid);
    return (await badge.isVisible()) ? badge.textContent() : '';
  };
  return {
    preview: await entry.getByTestId('group-preview').textContent(),
    mention: await shown('mention-badge'),
    unread: await shown('unread-badge'),
  };
}

test('messages are mentioned, recalled, edited, replied to and deleted, live in the other browser', { timeout: 120_000 }, async (t) => {
  const { signIn, problems, refusals, expectRefusal } = await startBrowser(t);
  const maya = await signIn('maya');
  const noah = await signIn('noah');

  await t.test('maya creates a group with noah', async () => {
    await maya.getByTestId('new-group-name').fill(GROUP);
    await maya.getByTestId('new-group-members').fill('noah');
    await maya.getByTestId('new-group-submit').click();
    await maya.getByTestId('chat-title').filter({ hasText: GROUP }).waitFor();
    await maya.locator('[data-testid="chat"][data-state="ready"]').waitFor();
    await groupEntry(noah, GROUP).waitFor({ timeout: LIVE_MS });
  });

  await t.test('mentions: noah gets an @ badge apart from the unread count, and the messages stand out', async () => {
    await send(maya, REVIEW);
    await send(maya, STANDUP);
    // Only members are mentioned: @zed is plain text.
    assert.deepEqual(await message(maya, REVIEW).getByTestId('mention').allTextContents(), ['@noah']);
    await eventually(async () => assert.deepEqual(await listEntry(noah, GROUP),
      { preview: `maya: ${STANDUP}`, mention: '@2', unread: '2' }));

    await groupEntry(noah, GROUP).click();
    await message(noah, STANDUP).waitFor();
    for (const text of [REVIEW, STANDUP]) {
      assert.match(await message(noah, text).getAttribute('class'), /\bmentions-me\b/, text);
    }
    assert.deepEqual(await message(noah, REVIEW).locator('.mention.me').allTextContents(), ['@noah']);
    assert.deepEqual(await message(noah, STANDUP).locator('.mention.me').allTextContents(), ['@all']);
    assert.doesNotMatch(await message(maya, REVIEW).getAttribute('class'), /mentions-me/, 'not for the sender');
    await eventually(async () => assert.deepEqual(await listEntry(noah, GROUP),
      { preview: `maya: ${STANDUP}`, mention: '', unread: '' }));
  });

  await t.test('recall: the message becomes a grey line in its place, for noah too', async () => {
    await send(maya, OOPS);
    await send(maya, LUNCH);
    await message(noah, LUNCH).waitFor({ timeout: LIVE_MS });
    await message(maya, OOPS).getByTestId('action-recall').click();
    const expected = (actor) => [REVIEW, STANDUP, `— ${actor} recalled a message —`, LUNCH];
    await eventually(async () => assert.deepEqual(await chatLog(maya), expected('You')));
    await eventually(async () => assert.deepEqual(await chatLog(noah), expected('maya')));
    assert.equal(await noah.getByText(OOPS).count(), 0, 'the text is gone');
  });

  await t.test('edit: the new text with an "(edited)" mark, for noah too', async () => {
    await message(maya, LUNCH).getByTestId('action-edit').click();
    await maya.getByTestId('edit-input').fill(LUNCH_EDITED);
    await maya.getByTestId('edit-input').press('Enter');
    for (const page of [maya, noah]) {
      const edited = message(page, LUNCH_EDITED);
      await edited.waitFor({ timeout: LIVE_MS });
      assert.equal(await edited.getByTestId('message-edited').textContent(), '(edited)');
      assert.equal(await message(page, LUNCH).count(), 0);
    }
    assert.equal(await maya.getByTestId('edit-form').count(), 0, 'the form closed');
  });

  await t.test('a refused edit is explained', async () => {
    // The server's window (a day by default) cannot pass in a test: the refusal is played back.
    await maya.route('**/v1/groups/*/messages', (route) => {
      if (route.request().method() !== 'POST' || route.request().postDataJSON().kind !== 'edit') return route.fallback();
      return route.fulfill({
        status: 409, contentType: 'application/json',
        body: JSON.stringify({ error: { code: 'edit_window_passed', message: 'message 5 can no longer be edited' } }),
      });
    });
    expectRefusal('maya', /status of 409/);
    await message(maya, LUNCH_EDITED).getByTestId('action-edit').click();
    await maya.getByTestId('edit-input').fill('Lunch at 2?');
    await maya.getByTestId('edit-save').click();
    await maya.getByTestId('chat-error')
      .filter({ hasText: 'Too late to edit this message: the time for editing it has passed.' }).waitFor();
    await maya.getByTestId('edit-cancel').click();
    await maya.unrouteAll();
    assert.equal(await message(maya, LUNCH_EDITED).count(), 1, 'unchanged');
    assert.deepEqual(refusals.get('maya'), [], 'the refusal was seen');
  });

  await t.test('reply: the composer shows what is replied to; the reply quotes it', async () => {
    await message(noah, LUNCH_EDITED).getByTestId('action-reply').click();
    const bar = noah.getByTestId('reply-bar');
    await bar.waitFor();
    assert.equal(await bar.getByTestId('reply-bar-sender').textContent(), 'maya');
    assert.equal(await bar.getByTestId('reply-bar-text').textContent(), LUNCH_EDITED);
    await bar.getByTestId('reply-cancel').click();
    await bar.waitFor({ state: 'hidden' });
    await message(noah, LUNCH_EDITED).getByTestId('action-reply').click();
    await send(noah, ANSWER);
    assert.equal(await bar.isVisible(), false, 'the bar goes with the send');
    for (const [page, sender] of [[noah, 'maya'], [maya, 'you']]) {
      const quote = message(page, ANSWER).getByTestId('message-quote');
      await quote.waitFor({ timeout: LIVE_MS });
      assert.equal(await quote.getByTestId('quote-sender').textContent(), sender);
      assert.equal(await quote.getByTestId('quote-text').textContent(), LUNCH_EDITED);
    }
    // The quoted message is recalled: the quotes say so.
    await message(maya, LUNCH_EDITED).getByTestId('action-recall').click();
    for (const page of [maya, noah]) {
      await eventually(async () => assert.equal(
        await message(page, ANSWER).getByTestId('quote-text').textContent(), 'recalled message'));
    }
  });

  await t.test('delete: the owner deletes noah\'s message; only the owner has the button', async () => {
    await send(noah, RANT);
    const actions = await message(noah, REVIEW).getByTestId('message-actions').locator('button').allTextContents();
    assert.deepEqual(actions, ['Reply'], 'noah may only reply to maya\'s message');
    assert.deepEqual(await message(noah, RANT).getByTestId('message-actions').locator('button').allTextContents(),
      ['Reply', 'Edit', 'Recall']);
    await message(maya, RANT).waitFor({ timeout: LIVE_MS });
    await message(maya, RANT).getByTestId('action-delete').click();
    await maya.getByTestId('delete-yes').click();
    for (const page of [maya, noah]) {
      await eventually(async () => assert.deepEqual((await chatLog(page)).slice(-2),
        [ANSWER, '— A message was deleted by the owner —']));
    }
  });

  let olga;
  await t.test('system lines: maya adds olga, then renames the group', async () => {
    olga = await signIn('olga');
    await maya.getByTestId('members-open').click();
    await maya.getByTestId('add-members-input').fill('olga');
    await maya.getByTestId('add-members-submit').click();
    await eventually(async () => assert.deepEqual(await memberIds(maya), ['maya', 'noah', 'olga']));
    await maya.getByTestId('rename-input').fill(RENAMED);
    await maya.getByTestId('rename-submit').click();
    await maya.getByTestId('members-info').filter({ hasText: `Renamed to “${RENAMED}”.` }).waitFor();
    await maya.getByTestId('members-close').click();

    const lines = (actor, added) => [`— ${actor} added ${added} —`, `— ${actor} renamed the group to “${RENAMED}” —`];
    await eventually(async () => assert.deepEqual((await chatLog(maya)).slice(-2), lines('You', 'olga')));
    await eventually(async () => assert.deepEqual((await chatLog(noah)).slice(-2), lines('maya', 'olga')));
    await noah.getByTestId('chat-title').filter({ hasText: RENAMED }).waitFor({ timeout: LIVE_MS });
    await noah.getByTestId('chat-sub').filter({ hasText: '· 3 members ·' }).waitFor({ timeout: LIVE_MS });
    // olga starts at the line that added her.
    await eventually(async () => assert.deepEqual(await listEntry(olga, RENAMED),
      { preview: `maya renamed the group to “${RENAMED}”`, mention: '', unread: '' }));
    await groupEntry(olga, RENAMED).click();
    await eventually(async () => assert.deepEqual(await chatLog(olga), lines('maya', 'you')));
    await maya.screenshot({ path: path.join(ARTIFACTS, 'browser-lifecycle.png') });
    await message(noah, ANSWER).hover(); // its actions show beside it
    await noah.screenshot({ path: path.join(ARTIFACTS, 'browser-lifecycle-other.png') });
  });

  await t.test('a change entry whose target is not loaded yet is applied when it is', async () => {
    await send(maya, OLD_NEWS);
    // A page's worth of messages, then an edit of the first: a new device of noah's loads the
    // edit with the last page, without its target.
    await maya.evaluate(async ({ name, fillers, oldNews }) => {
      const { token } = JSON.parse(sessionStorage.getItem('chorus.session'));
      const call = async (method, url, body) => (await fetch(url, {
        method, body: body && JSON.stringify(body),
        headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      })).json();
      const group = (await call('GET', '/v1/me/groups')).groups.find((g) => g.name === name);
      const url = `/v1/groups/${group.group_id}/messages`;
      const target = (await call('GET', `${url}?after_msg_id=0&limit=200`)).messages.find((m) => m.content === oldNews);
      for (let i = 1; i <= fillers; i++) await call('POST', url, { client_msg_id: `filler-${i}`, content: `filler ${i}` });
      await call('POST', url, { client_msg_id: 'fix-old-news', kind: 'edit', target_msg_id: target.msg_id, content: `${oldNews}, corrected` });
    }, { name: RENAMED, fillers: FILLERS, oldNews: OLD_NEWS });
    await eventually(async () => assert.equal((await chatLog(maya)).at(-1), `filler ${FILLERS}`), 10_000);
    await eventually(async () => assert.equal( // the edit comes in a pull of its own, maybe later
      await message(maya, `${OLD_NEWS}, corrected`).getByTestId('message-edited').count(), 1));

    const noahPhone = await signIn('noah', { phone: true });
    await groupEntry(noahPhone, RENAMED).click();
    await noahPhone.locator('[data-testid="chat"][data-state="ready"]').waitFor();
    const log = await chatLog(noahPhone);
    assert.equal(log.at(-1), `filler ${FILLERS}`);
    assert.equal(log.includes(OLD_NEWS) || log.includes(`${OLD_NEWS}, corrected`), false, 'the target is not loaded');
    assert.equal(log.length, FILLERS - 1, 'the change entry is not drawn');
    await noahPhone.getByTestId('load-older').click();
    const corrected = message(noahPhone, `${OLD_NEWS}, corrected`);
    await corrected.waitFor();
    assert.equal(await corrected.getByTestId('message-edited').textContent(), '(edited)');
    // On a touch screen a message's actions show once it is tapped.
    const actions = corrected.getByTestId('message-actions');
    assert.equal(await actions.isVisible(), false);
    await corrected.getByTestId('message-content').tap();
    await actions.getByTestId('action-reply').tap();
    await noahPhone.getByTestId('reply-bar-text').filter({ hasText: `${OLD_NEWS}, corrected` }).waitFor();
    await noahPhone.screenshot({ path: path.join(ARTIFACTS, 'browser-lifecycle-mobile.png') });
  });

  await t.test('user content was never parsed as HTML', async () => {
    for (const page of [maya, noah, olga]) {
      assert.equal(await page.locator('#messages i, #groups i, #chat-title i').count(), 0);
    }
  });

  assert.deepEqual(problems, []);
});
