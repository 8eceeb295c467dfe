// The README's curl walk-through, written as a front end would write it: types generated from
// openapi.yaml (src/schema.d.ts) and calls made through openapi-fetch. Every step checks its
// answer and throws on a mismatch, so `tsc --noEmit` proves the types fit and a run proves
// the server answers as the spec says.
//
// Environment: CHORUS (base URL, e.g. http://127.0.0.1:8080) and ALICE, BOB, CAROL (bearer
// tokens, e.g. from `chorus token alice`). .ci/typescript-client sets them for a fresh server.

import assert from "node:assert/strict";
import createClient, { type Client } from "openapi-fetch";
import type { components, paths } from "./schema.d.ts";

type Schemas = components["schemas"];

function env(name: string): string {
  const value = process.env[name];
  if (!value) throw new Error(`environment variable ${name} is not set`);
  return value;
}

const baseUrl = env("CHORUS");

/** One client per user: the only difference is the bearer token. */
function clientFor(token: string): Client<paths> {
  return createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${token}` } });
}

const alice = clientFor(env("ALICE"));
const bob = clientFor(env("BOB"));
const carol = clientFor(env("CAROL"));

/**
 * The body of a successful answer, after checking its HTTP status. On an error answer the
 * body is the spec's `Error` envelope, shown in the thrown message.
 */
function expectStatus<T>(
  step: string,
  status: number,
  result: { data?: T; error?: Schemas["Error"]; response: Response },
): T {
  const got = result.response.status;
  if (got !== status) {
    const detail = result.error ? `${result.error.error.code}: ${result.error.error.message}` : "";
    throw new Error(`${step}: expected HTTP ${status}, got ${got} ${detail}`);
  }
  if (result.data === undefined) throw new Error(`${step}: HTTP ${got} without a body`);
  return result.data;
}

function log(line: string): void {
  console.log(`ok - ${line}`);
}

// Alice creates a group with Bob and Carol; she becomes its owner.
const created: Schemas["Group"] = expectStatus(
  "create group",
  201,
  await alice.POST("/v1/groups", { body: { name: "team", member_ids: ["bob", "carol"] } }),
);
assert.equal(created.name, "team");
assert.equal(created.owner_id, "alice");
assert.equal(created.member_count, 3);
assert.equal(created.last_msg_id, 0);

// As in the README, find the group as the last of Alice's groups.
const aliceGroups = expectStatus("alice's groups", 200, await alice.GET("/v1/me/groups"));
const group = aliceGroups.groups.at(-1)?.group_id;
assert.equal(group, created.group_id, "the new group is the last of alice's groups");
const groupPath = { path: { group_id: created.group_id } };
log(`alice created group ${created.group_id} "team" with bob and carol (3 members)`);

// Alice sends two messages. Repeating a client_msg_id returns the original (200), no copy.
const first = expectStatus(
  "send c-0001",
  201,
  await alice.POST("/v1/groups/{group_id}/messages", {
    params: groupPath,
    body: { client_msg_id: "c-0001", content: "hello" },
  }),
);
assert.deepEqual(
  { msg_id: first.msg_id, sender_id: first.sender_id, client_msg_id: first.client_msg_id },
  { msg_id: 1, sender_id: "alice", client_msg_id: "c-0001" },
);
const second = expectStatus(
  "send c-0002",
  201,
  await alice.POST("/v1/groups/{group_id}/messages", {
    params: groupPath,
    body: { client_msg_id: "c-0002", content: "lunch?" },
  }),
);
assert.deepEqual(
  { msg_id: second.msg_id, sender_id: second.sender_id, client_msg_id: second.client_msg_id },
  { msg_id: 2, sender_id: "alice", client_msg_id: "c-0002" },
);
const repeated = expectStatus(
  "repeat c-0001",
  200,
  await alice.POST("/v1/groups/{group_id}/messages", {
    params: groupPath,
    body: { client_msg_id: "c-0001", content: "hello" },
  }),
);
assert.deepEqual(repeated, first, "a repeated client_msg_id returns the original message");
log("alice sent messages 1 and 2; repeating c-0001 answered 200 with message 1");

// Bob was offline: his unread summary, then the pull (starts after his last ack).
const bobUnread = expectStatus(
  "bob's unread groups",
  200,
  await bob.GET("/v1/me/groups", { params: { query: { unread_only: true } } }),
);
const bobTeam = bobUnread.groups.find((g) => g.group_id === created.group_id);
assert.ok(bobTeam, "bob's unread summary lists the group");
assert.equal(bobTeam.unread_count, 2);
log(`bob's unread summary: ${bobTeam.unread_count} unread in "${bobTeam.name}"`);

const page: Schemas["MessagesPage"] = expectStatus(
  "bob's pull",
  200,
  await bob.GET("/v1/groups/{group_id}/messages", {
    params: { ...groupPath, query: { limit: 50 } },
  }),
);
assert.deepEqual(
  page.messages.map((m) => [m.msg_id, m.sender_id, m.content]),
  [
    [1, "alice", "hello"],
    [2, "alice", "lunch?"],
  ],
);
assert.equal(page.has_more, false);
assert.equal(page.last_ack_msg_id, 0);
assert.ok(
  page.messages.every((m) => m.receipt === undefined),
  "no receipts without with_receipts",
);
const lastPulled = page.messages.at(-1)?.msg_id;
assert.ok(lastPulled !== undefined);
log(`bob pulled messages ${page.messages.map((m) => m.msg_id).join(", ")}`);

// Bob acks the page: one ack covers every earlier message. Nothing is unread afterwards.
const bobCursors: Schemas["Cursors"] = expectStatus(
  "bob's ack",
  200,
  await bob.POST("/v1/groups/{group_id}/ack", {
    params: groupPath,
    body: { last_ack_msg_id: lastPulled },
  }),
);
assert.deepEqual(bobCursors, {
  group_id: created.group_id,
  last_ack_msg_id: 2,
  last_read_msg_id: 2,
  last_msg_id: 2,
  unread_count: 0,
  unread_mention_count: 0,
});
const bobGroups = expectStatus("bob's groups", 200, await bob.GET("/v1/me/groups"));
const bobTeamAfter = bobGroups.groups.find((g) => g.group_id === created.group_id);
assert.ok(bobTeamAfter);
assert.equal(bobTeamAfter.unread_count, 0);
log("bob acked 2; unread 0");

// Alice, the sender, sees who has read message 1: Bob has, Carol has not.
const receipts = expectStatus(
  "receipts of message 1",
  200,
  await alice.GET("/v1/groups/{group_id}/messages/{msg_id}/receipts", {
    params: { path: { group_id: created.group_id, msg_id: 1 } },
  }),
);
assert.deepEqual(receipts.read_user_ids, ["bob"]);
assert.deepEqual(receipts.unread_user_ids, ["carol"]);
assert.equal(receipts.read_count, 1);
assert.equal(receipts.unread_count, 1);
assert.equal(receipts.next_cursor, null);
log("receipts of message 1: read by bob, not by carol");

// Senders long-poll for receipt changes. Without a cursor the answer comes at once, with one.
const start = expectStatus("receipts cursor", 200, await alice.GET("/v1/receipts"));
assert.deepEqual(start.changes, []);
const cursor: Schemas["FeedPosition"] = start.cursor;

// Carol reads both messages; the poll answers at once with the new counts.
expectStatus(
  "carol's ack",
  200,
  await carol.POST("/v1/groups/{group_id}/ack", {
    params: groupPath,
    body: { last_ack_msg_id: 2 },
  }),
);
const timeoutS = 25;
const poll = expectStatus(
  "receipts poll",
  200,
  await alice.GET("/v1/receipts", {
    params: { query: { cursor, timeout_s: timeoutS } },
    // The HTTP client's timeout must be above timeout_s.
    signal: AbortSignal.timeout((timeoutS + 10) * 1000),
  }),
);
const changes: Schemas["ReceiptChange"][] = poll.changes;
assert.deepEqual(
  changes.map((c) => [c.group_id, c.msg_id, c.read_count, c.unread_count, c.delivered_count]),
  [
    [created.group_id, 1, 2, 0, 2],
    [created.group_id, 2, 2, 0, 2],
  ],
);
assert.notEqual(poll.cursor, cursor);
log("carol acked 2; alice's receipts poll: messages 1 and 2 read by 2, unread 0");

console.log("TypeScript client walk-through: OK");
