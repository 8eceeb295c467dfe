//! Writes that queue while the database is busy share the next commit (on SQLite every write;
//! on PostgreSQL the messages to one group, and the acks), yet each keeps its own outcome, and
//! none answers before its data is committed.
//!
//! The queue is made honestly: the test holds the lock the writes need from a connection of
//! its own (SQLite's write lock; on PostgreSQL the group's row, which every send to the group
//! updates) while a burst of mixed writes arrives, then lets go. Commits and the writes they
//! carried are read from `/metrics` (`chorus_db_commits_total`, `chorus_db_writes_total`).

use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::json;

use crate::helpers::{HeldTransaction, TestApp, TestResponse};
use crate::on_both_engines;
use crate::on_postgres;
use crate::support::engine::Engine;
use chorus::config::Settings;

on_both_engines!(
    writes_queued_behind_a_busy_database_keep_their_own_outcomes,
    a_lone_write_commits_at_once_on_its_own,
    a_send_whose_client_hung_up_before_the_commit_still_wakes_the_waiters,
    messages_committed_together_move_each_senders_cursors_as_if_sent_one_by_one,
    a_member_removed_while_their_sends_wait_in_a_batch_has_none_stored,
    a_send_that_fails_the_database_fails_alone_and_the_others_of_its_batch_are_stored,
    messages_of_every_kind_queued_together_share_commits_and_keep_their_kind,
);
on_both_engines!(with one_write_per_commit: a_batch_of_one_gives_every_write_its_own_commit);
on_both_engines!(
    with four_writes_per_commit:
    a_commit_never_carries_more_writes_than_the_limit,
    sends_to_several_groups_never_share_a_commit_past_the_limit,
);
on_postgres!(on_postgres_a_failed_shared_transaction_fails_all_its_sends_and_stores_none);

/// How long the test holds the lock: long enough for the whole burst to queue, well inside
/// SQLite's busy timeout (5 s) and PostgreSQL's statement timeout.
const HOLD: Duration = Duration::from_millis(700);
const DISTINCT_SENDS: usize = 24;

fn one_write_per_commit(settings: &mut Settings) {
    settings.sqlite_write_batch = 1;
    settings.send_batch = 1;
}

const SMALL_BATCH: u64 = 4;

fn four_writes_per_commit(settings: &mut Settings) {
    settings.sqlite_write_batch = SMALL_BATCH;
    settings.send_batch = SMALL_BATCH;
}

/// A transaction of the test's own holding what the burst's writes need, until `release()`.
struct HeldLock(HeldTransaction);

impl HeldLock {
    async fn take(app: &TestApp, group_id: i64) -> HeldLock {
        HeldLock::take_doing(app, group_id, "").await
    }

    /// [`HeldLock::take`], and `also` runs in the same transaction: what it changes becomes
    /// visible at the release, to writes that were waiting for the lock.
    async fn take_doing(app: &TestApp, group_id: i64, also: &str) -> HeldLock {
        // SQLite: the write lock the transaction holds. PostgreSQL: the group's row, which
        // every send to the group updates.
        let lock = match app.engine {
            Engine::Sqlite => String::new(),
            Engine::Postgres => {
                format!("SELECT group_id FROM groups WHERE group_id = {group_id} FOR UPDATE;")
            }
        };
        HeldLock(app.transaction_held(&format!("{lock} {also}")).await)
    }

    /// Runs `writes` while the lock is held for `hold`, then lets go: what `writes` gave, and
    /// the instant the release was asked for (see [`HeldTransaction::commit`]).
    async fn release_after<T>(
        self,
        hold: Duration,
        writes: impl std::future::Future<Output = T>,
    ) -> (T, Instant) {
        tokio::join!(writes, async {
            tokio::time::sleep(hold).await;
            self.release().await
        })
    }

    /// Lets go and answers, once the lock is gone, with the instant the release was asked
    /// for: no write that needs the lock can commit before it.
    async fn release(self) -> Instant {
        self.0.commit().await
    }
}

/// What one request of the burst is, and how it must end.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Write {
    /// The k-th distinct message (its first attempt, or a duplicate attempt of it).
    Send(usize),
    /// A send by someone who is not a member: 403, nothing stored.
    Outsider,
    /// A reply to a message of the future: 400 naming `reply_to_msg_id`, nothing stored.
    BadReply,
    /// bob acks the message sent before the burst.
    Ack,
}

fn burst() -> Vec<Write> {
    let mut writes: Vec<Write> = (0..DISTINCT_SENDS).map(Write::Send).collect();
    // Every third message is sent twice at once: both attempts race inside the same batch.
    writes.extend((0..DISTINCT_SENDS).step_by(3).map(Write::Send));
    writes.extend([Write::Outsider, Write::BadReply, Write::Ack].repeat(3));
    writes
}

async fn run(app: &TestApp, group: i64, write: Write) -> (TestResponse, Instant) {
    let response = match write {
        Write::Send(k) => {
            app.send("alice", group, &format!("burst-{k}"), &format!("m{k}"))
                .await
        }
        Write::Outsider => {
            app.send("mallory", group, &format!("x-{}", rand_id()), "no")
                .await
        }
        Write::BadReply => {
            let body = json!({"content": "re", "reply_to_msg_id": 1_000_000});
            app.send_entry("bob", group, body).await
        }
        Write::Ack => app.ack("bob", group, json!({"last_ack_msg_id": 1})).await,
    };
    (response, Instant::now())
}

fn rand_id() -> String {
    crate::helpers::random_suffix()
}

async fn writes_queued_behind_a_busy_database_keep_their_own_outcomes(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "before the burst").await;
    let (commits_before, writes_before) = app.commits_and_writes().await;

    let lock = HeldLock::take(&app, group).await;
    let writes = burst();
    let (answers, release_asked) = lock
        .release_after(HOLD, join_all(writes.iter().map(|w| run(&app, group, *w))))
        .await;

    let mut first_ids = std::collections::HashMap::new();
    for (write, (response, answered)) in writes.iter().zip(&answers) {
        match write {
            Write::Send(k) => {
                assert!(
                    [200, 201].contains(&response.status),
                    "{write:?}: {:?}",
                    response.body
                );
                let id = response.body["msg_id"].as_i64().expect("msg_id");
                let first = *first_ids.entry(*k).or_insert(id);
                assert_eq!(
                    id, first,
                    "both attempts of message {k} name one stored message"
                );
                assert!(
                    *answered >= release_asked,
                    "a send answered before it could commit"
                );
            }
            Write::Outsider => assert_eq!(response.status, 403, "{:?}", response.body),
            Write::BadReply => {
                assert_eq!(
                    (response.status, response.error_code()),
                    (422, "no_such_entry"),
                    "{:?}",
                    response.body
                );
                assert!(response.body["error"]["message"]
                    .as_str()
                    .unwrap_or("")
                    .contains("reply_to_msg_id"));
            }
            Write::Ack => assert_eq!(response.status, 200, "{:?}", response.body),
        }
        if app.engine == Engine::Sqlite && response.status < 300 {
            assert!(
                *answered >= release_asked,
                "{write:?} answered before the lock was released"
            );
        }
    }
    let created = answers.iter().filter(|(r, _)| r.status == 201).count();
    assert_eq!(
        created, DISTINCT_SENDS,
        "one attempt of each message created it"
    );

    // Stored: the message before the burst and each distinct message once, ids 1..=25.
    let page = app
        .list_messages("bob", group, "?after_msg_id=0&limit=200")
        .await;
    let stored: Vec<(i64, String)> = page.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["msg_id"].as_i64().unwrap_or(0),
                m["content"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let ids: Vec<i64> = stored.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        (1..=DISTINCT_SENDS as i64 + 1).collect::<Vec<_>>(),
        "contiguous, nothing extra"
    );
    for (k, id) in &first_ids {
        assert_eq!(stored[(*id - 1) as usize].1, format!("m{k}"));
    }

    let (commits, writes_total) = app.commits_and_writes().await;
    let (commits, carried) = (commits - commits_before, writes_total - writes_before);
    assert!(
        carried >= (DISTINCT_SENDS + 3) as f64,
        "every accepted write was committed: {carried}"
    );
    match app.engine {
        // The burst queued behind the lock: far fewer commits than writes.
        Engine::Sqlite => assert!(
            commits * 4.0 <= carried,
            "{commits} commits for {carried} writes"
        ),
        // The new messages and their repeats share commits; every other write (an ack, a
        // refused send) may be a transaction of its own. Typically the messages take two
        // commits: the one that waited at the lock, and one for the rest.
        Engine::Postgres => {
            let others = carried - DISTINCT_SENDS as f64;
            let shared = commits - others;
            assert!(
                shared * 4.0 <= DISTINCT_SENDS as f64,
                "{DISTINCT_SENDS} messages took {shared} commits ({commits} commits for \
                 {carried} writes)"
            );
        }
    }
}

async fn a_lone_write_commits_at_once_on_its_own(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let (commits_before, writes_before) = app.commits_and_writes().await;

    app.send_ok("alice", group, "alone").await;

    let (commits, writes) = app.commits_and_writes().await;
    // A background job's write (the retention sweep) may land in the window too, so the
    // test asks that every commit there carried one write, the send's among them.
    let (commits, writes) = (commits - commits_before, writes - writes_before);
    assert!(writes >= 1.0, "the send was committed");
    assert_eq!(commits, writes, "no write waited to share a commit");
}

async fn a_batch_of_one_gives_every_write_its_own_commit(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let (commits_before, writes_before) = app.commits_and_writes().await;

    let lock = HeldLock::take(&app, group).await;
    let app_ref = &app;
    let (sends, _) = lock
        .release_after(
            HOLD,
            join_all((0..8).map(|k| async move {
                app_ref.send("alice", group, &format!("one-{k}"), "x").await
            })),
        )
        .await;
    let statuses: Vec<u16> = sends.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![201; 8]);

    // A background job's write may land in the window too: each commit still carries one.
    let (commits, writes) = app.commits_and_writes().await;
    assert_eq!(commits - commits_before, writes - writes_before);
    assert!(
        writes - writes_before >= 8.0,
        "the eight sends were committed"
    );
}

/// A client may hang up while its write waits for the database (a phone losing its network).
/// The write still commits, and whoever waits for it must hear of it then: the waking belongs
/// to the commit, not to the request that is no longer there.
async fn a_send_whose_client_hung_up_before_the_commit_still_wakes_the_waiters(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .expect("a client");

    let lock = HeldLock::take(&app, group).await;
    let hung_up = impatient
        .post(format!("{}/v1/groups/{group}/messages", app.address))
        .bearer_auth(app.token("alice"))
        .json(&json!({"client_msg_id": "gone-1", "content": "sent from a tunnel"}))
        .send()
        .await;
    assert!(hung_up.is_err(), "the client gave up first: {hung_up:?}");

    // Bob waits from his cursor; the lock goes and the abandoned send commits.
    let query = format!("?cursor={cursor}&timeout_s=30");
    let asked = Instant::now();
    let (woken, _) = lock
        .release_after(Duration::from_millis(300), app.poll_sync("bob", &query))
        .await;
    assert_eq!(woken.status, 200);
    assert_eq!(
        woken.body["groups"][0]["last_msg_id"], 1,
        "{:?}",
        woken.body
    );
    // Generous for a loaded machine; a poll nobody woke would take its full 30 s.
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "woken by the commit, not by the timeout: {:?}",
        asked.elapsed()
    );
}

async fn a_commit_never_carries_more_writes_than_the_limit(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let (commits_before, writes_before) = app.commits_and_writes().await;

    // The first send commits alone (a lone write never waits); 21 sends in commits of at most
    // 4 then take at least 6, where commits of 5 would take 5 however the first one went.
    const SENDS: i64 = 21;
    let lock = HeldLock::take(&app, group).await;
    let app_ref = &app;
    let (sends, _) = lock
        .release_after(
            HOLD,
            join_all((0..SENDS).map(|k| async move {
                app_ref
                    .send("alice", group, &format!("four-{k}"), "x")
                    .await
            })),
        )
        .await;
    let statuses: Vec<u16> = sends.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![201; SENDS as usize]);
    let page = app.list_messages("bob", group, "?after_msg_id=0").await;
    assert_eq!(
        crate::endpoints::msg_ids(&page.body),
        (1..=SENDS).collect::<Vec<_>>()
    );

    // A background job's write may land in the window too, in a commit of its own.
    let (commits, writes) = app.commits_and_writes().await;
    let (commits, writes) = (commits - commits_before, writes - writes_before);
    let for_the_sends = commits - (writes - SENDS as f64);
    assert!(
        for_the_sends >= 6.0,
        "no commit carried more than {SMALL_BATCH}: {commits} commits for {writes} writes"
    );
    assert!(
        for_the_sends * 2.0 <= SENDS as f64,
        "the queued sends still shared commits: {commits} commits for {writes} writes"
    );
}

/// Each group's queued sends are stored together, and on SQLite several groups' batches share
/// the writer's commit: the limit still counts every send, not every batch.
async fn sends_to_several_groups_never_share_a_commit_past_the_limit(app: TestApp) {
    let mut groups = Vec::new();
    for _ in 0..3 {
        groups.push(app.group_with("alice", &["bob"]).await);
    }
    let (commits_before, writes_before) = app.commits_and_writes().await;

    // 24 sends over three groups in commits of at most 4 take at least 6.
    const PER_GROUP: usize = 8;
    let sends = groups.len() * PER_GROUP;
    let lock = HeldLock::take(&app, groups[0]).await;
    let app_ref = &app;
    let (answers, _) = lock
        .release_after(
            HOLD,
            join_all(groups.iter().flat_map(|&group| {
                (0..PER_GROUP).map(move |k| async move {
                    app_ref.send("alice", group, &format!("g-{k}"), "x").await
                })
            })),
        )
        .await;
    let statuses: Vec<u16> = answers.iter().map(|r| r.status).collect();
    assert_eq!(statuses, vec![201; sends]);
    for &group in &groups {
        let page = app.list_messages("bob", group, "?after_msg_id=0").await;
        assert_eq!(
            crate::endpoints::msg_ids(&page.body).len(),
            PER_GROUP,
            "every send of group {group} stored once"
        );
    }

    // A background job's write may land in the window too, in a commit of its own.
    let (commits, writes) = app.commits_and_writes().await;
    let (commits, writes) = (commits - commits_before, writes - writes_before);
    let for_the_sends = commits - (writes - sends as f64);
    assert!(
        for_the_sends * SMALL_BATCH as f64 >= sends as f64,
        "no commit carried more than {SMALL_BATCH}: {commits} commits for {writes} writes"
    );
}

/// On PostgreSQL the messages queued for a group are stored by one transaction; when it
/// times out, here because the group's lock is held past the statement timeout, every send
/// it carried answers 503 (alone, each would have waited the same) and none is stored, and
/// each retry with the same `client_msg_id` then stores its message once, ids contiguous.
async fn on_postgres_a_failed_shared_transaction_fails_all_its_sends_and_stores_none() {
    let app = crate::helpers::spawn_app_with(Engine::Postgres, |s| {
        s.statement_timeout_ms = 400;
    })
    .await;
    let group = app.group_with("alice", &["bob"]).await;
    let senders = ["alice", "bob"];

    // Every send is made at once and waits at the lock, in the first statement or the one
    // after it; both time out long before the lock goes.
    let lock = HeldLock::take(&app, group).await;
    let app_ref = &app;
    let (failed, _) = lock
        .release_after(
            Duration::from_secs(3),
            join_all((0..8).map(|k| async move {
                let sender = senders[k % 2];
                app_ref.send(sender, group, &format!("late-{k}"), "x").await
            })),
        )
        .await;
    for reply in &failed {
        assert_eq!(reply.status, 503, "{:?}", reply.body);
    }
    let page = app.list_messages("bob", group, "?after_msg_id=0").await;
    assert_eq!(
        crate::endpoints::msg_ids(&page.body),
        Vec::<i64>::new(),
        "none stored"
    );

    let retried = join_all((0..8).map(|k| async move {
        let sender = senders[k % 2];
        app_ref.send(sender, group, &format!("late-{k}"), "x").await
    }))
    .await;
    for reply in &retried {
        assert_eq!(reply.status, 201, "{:?}", reply.body);
    }
    let page = app.list_messages("bob", group, "?after_msg_id=0").await;
    assert_eq!(
        crate::endpoints::msg_ids(&page.body),
        (1..=8).collect::<Vec<_>>()
    );
}

/// Three members (one on a phone) each send three messages at once while the group is busy,
/// so most share a commit. Each sender has read and received their own messages, and only
/// those: a cursor moves onto a sender's message only from just below it, exactly as if the
/// messages had been committed one by one in id order. All three first read message 1, so
/// each sender's cursors end at the end of the run of their own messages right after it (1
/// if message 2 is someone else's), and everything after that from the others is unread.
async fn messages_committed_together_move_each_senders_cursors_as_if_sent_one_by_one(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    app.send_ok("alice", group, "before").await;
    for reader in ["bob", "carol#phone"] {
        let ack = app.ack(reader, group, json!({"last_ack_msg_id": 1})).await;
        assert_eq!(ack.status, 200, "{:?}", ack.body);
    }
    let senders = ["alice", "bob", "carol#phone"];
    let lock = HeldLock::take(&app, group).await;
    let app_ref = &app;
    let (sends, _) = lock
        .release_after(
            HOLD,
            join_all((0..9).map(|k| async move {
                let sender = senders[k % 3];
                let reply = app_ref.send(sender, group, &format!("t-{k}"), "x").await;
                (sender, reply)
            })),
        )
        .await;
    let mut sender_of = std::collections::BTreeMap::new();
    for (sender, reply) in &sends {
        assert_eq!(reply.status, 201, "{:?}", reply.body);
        let id = reply.body["msg_id"].as_i64().expect("msg_id");
        sender_of.insert(id, sender.split('#').next().unwrap_or(sender));
    }
    assert_eq!(
        sender_of.keys().copied().collect::<Vec<_>>(),
        (2..=10).collect::<Vec<_>>()
    );

    for sender in senders {
        let user = sender.split('#').next().unwrap_or(sender);
        let read_to = 1 + sender_of.values().take_while(|s| **s == user).count() as i64;
        let unread = sender_of
            .iter()
            .filter(|(id, s)| **id > read_to && **s != user)
            .count();
        let listed = app.my_groups(sender, "").await;
        let row = &listed.body["groups"][0];
        assert_eq!(
            row["last_read_msg_id"], read_to,
            "{sender}: {sender_of:?} {row}"
        );
        assert_eq!(
            row["last_ack_msg_id"], read_to,
            "{sender}: {sender_of:?} {row}"
        );
        assert_eq!(row["unread_count"], unread, "{sender}: {sender_of:?} {row}");
    }
}

/// Bob's and alice's messages wait together for the group, and the transaction they wait for
/// removes bob. Once it commits, every send of bob's is refused 403 and stores nothing, while
/// alice's, waiting in the same batches, are stored, with ids contiguous.
async fn a_member_removed_while_their_sends_wait_in_a_batch_has_none_stored(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let removal = format!("DELETE FROM group_members WHERE group_id = {group} AND user_id = 'bob'");
    let lock = HeldLock::take_doing(&app, group, &removal).await;
    let app_ref = &app;
    let (sends, _) = lock
        .release_after(
            HOLD,
            join_all((0..12).map(|k| async move {
                let sender = ["alice", "bob"][k % 2];
                let reply = app_ref.send(sender, group, &format!("rm-{k}"), "x").await;
                (sender, reply)
            })),
        )
        .await;
    for (sender, reply) in &sends {
        let expected = if *sender == "alice" { 201 } else { 403 };
        assert_eq!(reply.status, expected, "{sender}: {:?}", reply.body);
    }
    let page = app.list_messages("alice", group, "?after_msg_id=0").await;
    assert_eq!(
        crate::endpoints::msg_ids(&page.body),
        (1..=6).collect::<Vec<_>>()
    );
    let senders: Vec<&str> = page.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["sender_id"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        senders,
        vec!["alice"; 6],
        "nothing of bob's after his removal"
    );
}

/// A trigger (SQLite) or constraint (PostgreSQL) of the test's own makes the database refuse
/// one message ("poison") with an error of its own, as a bug might. Queued in one batch with seven clean sends, the
/// poisoned send answers 500 and stores nothing, and the seven are stored, ids contiguous: on
/// SQLite it fails in its own savepoint, on PostgreSQL the shared statement fails and each send
/// then goes alone.
async fn a_send_that_fails_the_database_fails_alone_and_the_others_of_its_batch_are_stored(
    app: TestApp,
) {
    let group = app.group_with("alice", &["bob"]).await;
    let lock = match app.engine {
        Engine::Sqlite => {
            let poison = "CREATE TRIGGER poison BEFORE INSERT ON group_msgs \
                 WHEN NEW.content = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END;";
            HeldLock::take_doing(&app, group, poison).await
        }
        // A constraint rather than a trigger: Citus carries it to every shard. Added before
        // the lock is taken, in a statement of its own: Citus refuses DDL on a distributed
        // table in a transaction that has already locked one of its rows.
        Engine::Postgres => {
            app.run_postgres_sql(
                "ALTER TABLE group_msgs ADD CONSTRAINT poison \
                 CHECK (content <> 'poison') NOT VALID",
            )
            .await;
            HeldLock::take(&app, group).await
        }
    };
    let app_ref = &app;
    let (sends, _) = lock
        .release_after(
            HOLD,
            join_all((0..8).map(|k| async move {
                let content = if k == 4 { "poison" } else { "clean" };
                let sender = ["alice", "bob"][k % 2];
                app_ref
                    .send(sender, group, &format!("p-{k}"), content)
                    .await
            })),
        )
        .await;
    for (k, reply) in sends.iter().enumerate() {
        let expected = if k == 4 { 500 } else { 201 };
        assert_eq!(reply.status, expected, "send {k}: {:?}", reply.body);
    }
    let page = app.list_messages("alice", group, "?after_msg_id=0").await;
    assert_eq!(
        crate::endpoints::msg_ids(&page.body),
        (1..=7).collect::<Vec<_>>()
    );
    let contents: Vec<&str> = page.body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(contents, vec!["clean"; 7]);
}

/// Every kind of message is stored the same way: plain messages, messages with mentions, a
/// reply and an edit queued together for a busy group share commits, take the ids after the
/// message before them with none skipped, and each keeps what makes it what it is: the
/// mentions count for the member mentioned, the reply points at its message, the edit changes
/// the text it targets.
async fn messages_of_every_kind_queued_together_share_commits_and_keep_their_kind(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let first = app.send_ok("alice", group, "first").await;
    let (commits_before, writes_before) = app.commits_and_writes().await;

    let lock = HeldLock::take(&app, group).await;
    let bodies = [
        ("alice", json!({"content": "plain 1"})),
        (
            "bob",
            json!({"content": "@carol look", "mentions": ["carol"]}),
        ),
        ("alice", json!({"content": "plain 2"})),
        (
            "carol",
            json!({"content": "answer", "reply_to_msg_id": first}),
        ),
        (
            "bob",
            json!({"content": "@carol again", "mentions": ["carol"]}),
        ),
        (
            "alice",
            json!({"kind": "edit", "target_msg_id": first, "content": "first, edited"}),
        ),
        ("alice", json!({"content": "plain 3"})),
    ];
    let app_ref = &app;
    let (sent, _) = lock
        .release_after(
            HOLD,
            join_all(
                bodies
                    .iter()
                    .map(|(user, body)| app_ref.send_entry(user, group, body.clone())),
            ),
        )
        .await;
    for reply in &sent {
        assert_eq!(reply.status, 201, "{:?}", reply.body);
    }
    let mut ids: Vec<i64> = sent
        .iter()
        .filter_map(|r| r.body["msg_id"].as_i64())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (first + 1..=first + 7).collect::<Vec<_>>());

    let (commits, writes) = app.commits_and_writes().await;
    let (commits, writes) = (commits - commits_before, writes - writes_before);
    assert!(writes >= 7.0, "the seven sends were committed: {writes}");
    assert!(
        commits < writes,
        "the queued messages shared commits: {commits} commits for {writes} writes"
    );

    let listed = app.my_groups("carol", "").await;
    assert_eq!(
        listed.body["groups"][0]["unread_mention_count"], 2,
        "{:?}",
        listed.body
    );
    for (k, (_, body)) in bodies.iter().enumerate() {
        let id = sent[k].body["msg_id"].as_i64().expect("msg_id");
        if body.get("mentions").is_some() {
            assert_eq!(app.stored_mention_rows(group, id).await, vec!["carol"]);
        } else {
            assert!(app.stored_mention_rows(group, id).await.is_empty());
        }
    }
    let page = app.list_messages("bob", group, "?after_msg_id=0").await;
    let messages = page.body["messages"].as_array().expect("messages");
    let by_id = |id: i64| messages.iter().find(|m| m["msg_id"] == id).cloned();
    let original = by_id(first).expect("the first message");
    assert_eq!(original["content"], "first, edited", "{original}");
    let reply_id = sent[3].body["msg_id"].as_i64().expect("msg_id");
    let reply = by_id(reply_id).expect("the reply");
    assert_eq!(reply["reply_to_msg_id"], first, "{reply}");
}
