//! Long-polls: /v1/sync for members, /v1/receipts for senders. Answers at once when there is
//! news, waits otherwise, wakes on commits (also across instances), never skips a change.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chorus::config::Settings;
use futures::future::join_all;
use serde_json::{json, Value};

use crate::helpers::{spawn_app, TestApp};
use crate::on_both_engines;
use crate::on_postgres;
use crate::support::engine::Engine;

on_both_engines!(
    polls_without_cursor_answer_at_once_with_a_cursor,
    sync_wakes_a_waiting_member_when_a_message_arrives,
    receipts_wake_a_waiting_sender_when_a_member_acks,
    timeout_answers_empty_with_a_usable_cursor,
    retrying_a_cursor_repeats_changes_but_never_skips,
    bad_cursors_and_timeouts_get_400,
    shutdown_answers_waiting_polls_before_their_timeout,
    sync_reports_every_committed_message_under_concurrency,
    receipts_report_every_ack_under_concurrency,
    a_waiting_member_added_to_a_group_hears_its_first_message,
    a_waiting_owner_hears_the_first_message_of_the_group_they_create,
    every_group_created_with_a_waiting_member_wakes_their_poll,
    sync_hands_out_a_window_page_by_page_then_what_came_after,
    receipts_hand_out_a_window_page_by_page_then_what_came_after,
);

on_postgres!(
    a_message_committing_after_a_later_one_is_reported_by_the_next_poll,
    an_ack_committing_after_a_later_one_is_reported_by_the_next_poll,
);

on_both_engines!(with short_retention:
    cursor_older_than_retention_gets_410,
    retention_job_deletes_old_receipt_changes,
);

on_both_engines!(with two_polls_per_user:
    waiters_beyond_the_per_user_bound_get_429,
);

fn short_retention(s: &mut Settings) {
    s.receipt_retention_secs = 1;
    s.retention_interval_secs = 1;
}

fn two_polls_per_user(s: &mut Settings) {
    s.longpoll_max_per_user = 2;
}

async fn polls_without_cursor_answer_at_once_with_a_cursor(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    app.send_ok("alice", group, "already there").await;

    let sync = app.poll_sync("bob", "?timeout_s=30").await;
    let receipts = app.poll_receipts("alice", "?timeout_s=30").await;

    assert_eq!(sync.status, 200);
    assert_eq!(
        sync.body["groups"],
        json!([]),
        "no cursor: current position, no history"
    );
    assert!(sync.body["cursor"].as_str().is_some_and(|c| !c.is_empty()));
    assert_eq!(receipts.body["changes"], json!([]));
}

async fn sync_wakes_a_waiting_member_when_a_message_arrives(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;

    let query = format!("?cursor={cursor}&timeout_s=30");
    let (poll, _) = tokio::join!(app.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.send_ok("alice", group, "wake up").await
    });

    assert_eq!(poll.status, 200);
    assert_eq!(poll.body["groups"][0]["group_id"], group);
    assert_eq!(poll.body["groups"][0]["last_msg_id"], 1);
    assert_eq!(poll.body["groups"][0]["unread_count"], 1);
    let next = poll.body["cursor"].as_str().unwrap();
    let quiet = app
        .poll_sync("bob", &format!("?cursor={next}&timeout_s=0"))
        .await;
    assert_eq!(
        quiet.body["groups"],
        json!([]),
        "the new cursor is past the reported message"
    );
}

async fn receipts_wake_a_waiting_sender_when_a_member_acks(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    app.send_ok("alice", group, "one").await;
    app.send_ok("alice", group, "two").await;
    let cursor = app.cursor("alice", "/v1/receipts").await;

    let query = format!("?cursor={cursor}&timeout_s=30");
    let (poll, _) = tokio::join!(app.poll_receipts("alice", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.ack("bob", group, json!({"last_ack_msg_id": 2})).await
    });

    assert_eq!(poll.status, 200);
    assert_eq!(
        poll.body["changes"],
        json!([
            {"group_id": group, "msg_id": 1, "read_count": 1, "unread_count": 1, "delivered_count": 1},
            {"group_id": group, "msg_id": 2, "read_count": 1, "unread_count": 1, "delivered_count": 1}
        ])
    );
}

async fn timeout_answers_empty_with_a_usable_cursor(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;

    let timed_out = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=1"))
        .await;
    app.send_ok("alice", group, "after the timeout").await;
    let next = timed_out.body["cursor"].as_str().unwrap();
    let after = app
        .poll_sync("bob", &format!("?cursor={next}&timeout_s=0"))
        .await;

    assert_eq!(timed_out.status, 200);
    assert_eq!(timed_out.body["groups"], json!([]));
    assert_eq!(after.body["groups"][0]["group_id"], group);
}

async fn retrying_a_cursor_repeats_changes_but_never_skips(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;
    app.send_ok("alice", group, "one").await;

    let first = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;
    // The response is "lost": the client retries with the old cursor after another send.
    app.send_ok("alice", group, "two").await;
    let retry = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;

    assert_eq!(first.body["groups"][0]["last_msg_id"], 1);
    assert_eq!(retry.body["groups"][0]["last_msg_id"], 2);
}

async fn bad_cursors_and_timeouts_get_400(app: TestApp) {
    let receipts_cursor = app.cursor("alice", "/v1/receipts").await;
    let cases = [
        "?cursor=garbage".to_owned(),
        "?cursor=".to_owned(),
        format!("?cursor={receipts_cursor}"),
        "?timeout_s=-1".to_owned(),
        "?timeout_s=abc".to_owned(),
        "?limit=0".to_owned(),
    ];
    for query in cases {
        let r = app.poll_sync("alice", &query).await;
        assert_eq!(r.status, 400, "{query}: {:?}", r.body);
    }
    let clamped = app.poll_sync("alice", "?timeout_s=100000").await;
    assert_eq!(
        clamped.status, 200,
        "too long a timeout is clamped, not refused"
    );
}

async fn shutdown_answers_waiting_polls_before_their_timeout(app: TestApp) {
    app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;
    let started = Instant::now();

    let query = format!("?cursor={cursor}&timeout_s=60");
    let (poll, _) = tokio::join!(app.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.stopper.clone().stop().await
    });

    assert_eq!(poll.status, 200);
    assert_eq!(poll.body["groups"], json!([]));
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "answered before its timeout"
    );
}

async fn cursor_older_than_retention_gets_410(app: TestApp) {
    let cursor = app.cursor("alice", "/v1/receipts").await;
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let r = app
        .poll_receipts("alice", &format!("?cursor={cursor}&timeout_s=0"))
        .await;

    assert_eq!(r.status, 410);
    assert_eq!(r.error_code(), "cursor_expired");
}

async fn retention_job_deletes_old_receipt_changes(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=5 {
        app.send_ok("alice", group, "x").await;
        app.ack("bob", group, json!({"last_ack_msg_id": i})).await;
    }
    assert_eq!(
        count_rows(&app, "receipt_events"),
        5,
        "one row per ack that moved a cursor"
    );

    let deadline = Instant::now() + Duration::from_secs(20);
    while count_rows(&app, "receipt_events") > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    assert_eq!(
        count_rows(&app, "receipt_events"),
        0,
        "old receipt changes were deleted"
    );
    assert_eq!(
        count_rows(&app, "group_msgs"),
        5,
        "messages are core data and stay"
    );
    let receipts = app.message_receipts("alice", group, 5, "").await;
    assert_eq!(
        receipts.body["read_count"], 1,
        "receipts themselves come from cursors"
    );
}

async fn waiters_beyond_the_per_user_bound_get_429(app: TestApp) {
    let cursor = app.cursor("bob", "/v1/sync").await;
    let query = format!("?cursor={cursor}&timeout_s=3");

    let (a, b, third) = tokio::join!(
        app.poll_sync("bob", &query),
        app.poll_sync("bob", &query),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            app.poll_sync("bob", &query).await
        }
    );

    assert_eq!((a.status, b.status), (200, 200));
    assert_eq!(third.status, 429);
    assert_eq!(third.error_code(), "too_many_waiters");
    let later = app
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;
    assert_eq!(later.status, 200, "slots are released when polls answer");
}

const GROUPS: usize = 16;
const ROUNDS: i64 = 8;

/// Polls `path` as `user` from a fresh cursor until `done` says the collected state is
/// complete or 60 s pass; returns everything each answer reported.
async fn poll_until(
    app: &TestApp,
    user: &str,
    path: &str,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let cursor = app.cursor(user, path).await;
    poll_from_until(app, user, path, cursor, done).await.0
}

/// Polls `path` as `user` from `cursor` until `done` says the collected state is complete or
/// 60 s pass; returns everything each answer reported, and the last answer's cursor.
pub(crate) async fn poll_from_until(
    app: &TestApp,
    user: &str,
    path: &str,
    mut cursor: String,
    done: impl Fn(&[Value]) -> bool,
) -> (Vec<Value>, String) {
    let mut seen: Vec<Value> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(&seen) && Instant::now() < deadline {
        let r = app
            .call(
                reqwest::Method::GET,
                path,
                &format!("{path}?cursor={cursor}&timeout_s=2"),
                Some(user),
                None,
            )
            .await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let key = if path == "/v1/sync" {
            "groups"
        } else {
            "changes"
        };
        seen.extend(r.body[key].as_array().unwrap().iter().cloned());
        cursor = r.body["cursor"].as_str().unwrap().to_owned();
    }
    (seen, cursor)
}

fn latest_per_group(seen: &[Value]) -> BTreeMap<i64, i64> {
    let mut latest = BTreeMap::new();
    for g in seen {
        let entry = latest.entry(g["group_id"].as_i64().unwrap()).or_insert(0);
        *entry = (*entry).max(g["last_msg_id"].as_i64().unwrap());
    }
    latest
}

async fn sync_reports_every_committed_message_under_concurrency(app: TestApp) {
    let app = &app;
    let mut groups = Vec::new();
    for g in 0..GROUPS {
        groups.push(
            app.group_with(&format!("sender{g}"), &["watcher", "other"])
                .await,
        );
    }
    let all_final = |seen: &[Value]| {
        let latest = latest_per_group(seen);
        latest.len() == GROUPS && latest.values().all(|v| *v == ROUNDS)
    };

    let pollers = join_all([
        poll_until(app, "watcher", "/v1/sync", all_final),
        poll_until(app, "watcher", "/v1/sync", all_final),
        poll_until(app, "other", "/v1/sync", all_final),
    ]);
    let senders = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for round in 0..ROUNDS {
            // Every group gets one message at once: concurrent transactions that take ids in
            // one order and may commit in another.
            join_all(groups.iter().enumerate().map(|(g, &group)| async move {
                let r = app
                    .send(&format!("sender{g}"), group, &format!("r{round}"), "x")
                    .await;
                assert_eq!(r.status, 201);
            }))
            .await;
        }
    };
    let (seen_by_pollers, ()) = tokio::join!(pollers, senders);

    for seen in &seen_by_pollers {
        let latest = latest_per_group(seen);
        let expected: BTreeMap<i64, i64> = groups.iter().map(|&g| (g, ROUNDS)).collect();
        assert_eq!(
            latest, expected,
            "every group's last message reached every poller"
        );
    }
}

async fn receipts_report_every_ack_under_concurrency(app: TestApp) {
    let app = &app;
    let mut groups = Vec::new();
    for g in 0..GROUPS {
        groups.push(app.group_with("sender", &[&format!("reader{g}")]).await);
    }
    let read_everything = |seen: &[Value]| {
        let fully_read = seen
            .iter()
            .filter(|c| c["msg_id"] == ROUNDS && c["read_count"] == 1)
            .count();
        fully_read >= GROUPS
    };

    let poller = poll_until(app, "sender", "/v1/receipts", read_everything);
    let traffic = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        for round in 1..=ROUNDS {
            for &group in &groups {
                app.send_ok("sender", group, &format!("r{round}")).await;
            }
            join_all(groups.iter().enumerate().map(|(g, &group)| async move {
                let r = app
                    .ack(
                        &format!("reader{g}"),
                        group,
                        json!({"last_ack_msg_id": round}),
                    )
                    .await;
                assert_eq!(r.status, 200);
            }))
            .await;
        }
    };
    let (seen, ()) = tokio::join!(poller, traffic);

    for &group in &groups {
        for msg_id in 1..=ROUNDS {
            let reported = seen
                .iter()
                .any(|c| c["group_id"] == group && c["msg_id"] == msg_id && c["read_count"] == 1);
            assert!(
                reported,
                "group {group} msg {msg_id}: its read was never reported"
            );
        }
    }
}

/// Two instances on one PostgreSQL: a member's ack on B wakes the sender waiting on A.
async fn ack_on_one_instance_wakes_a_poll_on_another() {
    let a = spawn_app(Engine::Postgres).await;
    let second = a.second_instance().await;
    let b = a.via(&second);
    let group = a.group_with("alice", &["bob"]).await;
    a.send_ok("alice", group, "hello").await;
    let receipts_cursor = a.cursor("alice", "/v1/receipts").await;
    let sync_cursor = b.cursor("bob", "/v1/sync").await;

    let receipts_query = format!("?cursor={receipts_cursor}&timeout_s=30");
    let sync_query = format!("?cursor={sync_cursor}&timeout_s=30");
    let (receipts, sync, _) = tokio::join!(
        a.poll_receipts("alice", &receipts_query),
        b.poll_sync("bob", &sync_query),
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            b.ack("bob", group, json!({"last_ack_msg_id": 1})).await;
            a.send_ok("alice", group, "second").await;
        }
    );

    assert_eq!(
        receipts.body["changes"][0]["read_count"], 1,
        "A heard of B's ack"
    );
    assert_eq!(
        sync.body["groups"][0]["last_msg_id"], 2,
        "B heard of A's message"
    );
}

fn count_rows(app: &TestApp, table: &str) -> i64 {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let settings = chorus::db::DbSettings::for_url(&app.database_url);
    let mut conn = chorus::db::connect_once(&settings).expect("connect");
    let row: Count = diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}"))
        .get_result(&mut conn)
        .expect("count");
    row.n
}

async fn a_waiting_member_added_to_a_group_hears_its_first_message(app: TestApp) {
    let group = app.group_with("alice", &["carol"]).await;
    app.send_ok("alice", group, "before bob").await;
    let bob_cursor = app.cursor("bob", "/v1/sync").await;
    let query = format!("?cursor={bob_cursor}&timeout_s=30");

    let (joined, _) = tokio::join!(app.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.add_members("alice", group, &["bob"]).await;
    });
    assert_eq!(joined.status, 200);
    assert_eq!(
        joined.body["groups"][0]["group_id"], group,
        "the group appears"
    );
    assert_eq!(
        joined.body["groups"][0]["unread_count"], 0,
        "being added is never unread"
    );
    assert_eq!(
        joined.body["groups"][0]["last_message"]["kind"], "member_joined",
        "nothing sent before the join reaches bob, only the line saying he joined"
    );

    let query = format!(
        "?cursor={}&timeout_s=30",
        joined.body["cursor"].as_str().unwrap()
    );
    let (poll, _) = tokio::join!(app.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.send_ok("alice", group, "welcome bob").await
    });

    assert_eq!(poll.status, 200);
    assert_eq!(
        poll.body["groups"][0]["group_id"], group,
        "the join re-registered the wait"
    );
    assert_eq!(poll.body["groups"][0]["unread_count"], 1);
    assert_eq!(
        poll.body["groups"][0]["last_message"]["preview"],
        "welcome bob"
    );
}

on_both_engines!(with short_message_retention:
    message_retention_deletes_old_messages_and_keeps_cursors_and_ids,
);
on_postgres!(
    ack_on_one_instance_wakes_a_poll_on_another,
    a_lost_announcement_delays_a_poll_to_its_timeout_and_skips_nothing
);

fn short_message_retention(s: &mut Settings) {
    s.message_retention_secs = Some(2);
    s.retention_interval_secs = 1;
}

async fn message_retention_deletes_old_messages_and_keeps_cursors_and_ids(app: TestApp) {
    let group = app.group_with("alice", &["bob"]).await;
    for i in 1..=3 {
        app.send_ok("alice", group, &format!("old {i}")).await;
    }
    app.ack("bob", group, json!({"last_ack_msg_id": 2})).await;

    let deadline = Instant::now() + Duration::from_secs(20);
    while count_rows(&app, "group_msgs") > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let fresh = app.send_ok("alice", group, "new").await;
    let pull = app.list_messages("bob", group, "").await;
    let mine = app.my_groups("bob", "").await;

    assert_eq!(fresh, 4, "ids are never reused after deletion");
    let ids: Vec<i64> = pull.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["msg_id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, vec![4], "the pull skips what expired and continues");
    assert_eq!(
        mine.body["groups"][0]["last_ack_msg_id"], 2,
        "cursors are untouched"
    );
    assert_eq!(mine.body["groups"][0]["last_msg_id"], 4);
}

async fn a_waiting_owner_hears_the_first_message_of_the_group_they_create(app: TestApp) {
    let cursor = app.cursor("alice", "/v1/sync").await;
    let query = format!("?cursor={cursor}&timeout_s=30");

    let (poll, group) = tokio::join!(app.poll_sync("alice", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let group = app.group_with("alice", &["bob"]).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        app.send_ok("bob", group, "hi alice").await;
        group
    });

    assert_eq!(poll.status, 200);
    assert_eq!(
        poll.body["groups"][0]["group_id"], group,
        "the creation re-registered the wait"
    );
}

async fn every_group_created_with_a_waiting_member_wakes_their_poll(app: TestApp) {
    let mut slow = Vec::new();
    for round in 0..60u64 {
        let cursor = app.cursor("bob", "/v1/sync").await;
        let query = format!("?cursor={cursor}&timeout_s=10");
        let started = Instant::now();
        let (poll, _) = tokio::join!(app.poll_sync("bob", &query), async {
            tokio::time::sleep(Duration::from_millis(round % 7)).await;
            app.group_with("alice", &["bob"]).await
        });
        assert_eq!(poll.status, 200);
        if poll.body["groups"].as_array().is_none_or(Vec::is_empty) {
            slow.push((round, started.elapsed()));
        }
    }
    assert!(slow.is_empty(), "polls that missed the new group: {slow:?}");
}

/// Two instances on one PostgreSQL tell each other of their writes after the commit. When an
/// instance never does (here it is set to announce nothing: as if it died after each commit,
/// before telling the others), a poll on the other instance still answers by its timeout, and
/// the next poll from the cursor it got returns the message it was not told of.
async fn a_lost_announcement_delays_a_poll_to_its_timeout_and_skips_nothing() {
    let a = spawn_app(Engine::Postgres).await;
    let silent = a.second_instance_with(|s| s.announce_wakes = false).await;
    let telling = a.second_instance().await;
    let (silent, telling) = (a.via(&silent), a.via(&telling));
    let group = a.group_with("alice", &["bob"]).await;
    let cursor = a.cursor("bob", "/v1/sync").await;

    // Told: a send through an instance that announces wakes the poll waiting on A. The
    // bound is generous for a loaded machine; a poll that was never woken would take 30 s.
    let asked = Instant::now();
    let query = format!("?cursor={cursor}&timeout_s=30");
    let (woken, _) = tokio::join!(a.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        telling.send_ok("alice", group, "told").await;
    });
    assert_eq!(woken.status, 200);
    assert_eq!(woken.body["groups"][0]["last_msg_id"], 1);
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "woken by the announcement, not by the timeout: {:?}",
        asked.elapsed()
    );
    let cursor = woken.body["cursor"].as_str().expect("cursor").to_owned();

    // Not told: the poll answers at its timeout (3 s), not later.
    let timeout = Duration::from_secs(3);
    let asked = Instant::now();
    let query = format!("?cursor={cursor}&timeout_s=3");
    let (late, _) = tokio::join!(a.poll_sync("bob", &query), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        silent.send_ok("alice", group, "untold").await;
    });
    let waited = asked.elapsed();
    assert_eq!(late.status, 200, "{:?}", late.body);
    assert!(
        waited >= timeout - Duration::from_millis(100),
        "nothing woke it early: {waited:?}"
    );
    assert!(
        waited < timeout + Duration::from_secs(5),
        "it answered by its timeout (with slack for a loaded machine): {waited:?}"
    );

    // Whatever that answer held, the next poll from its cursor has the message: nothing is
    // skipped, it only arrived up to one poll timeout late.
    let cursor = late.body["cursor"].as_str().expect("cursor");
    let next = a
        .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=0"))
        .await;
    let reported = |r: &crate::helpers::TestResponse| {
        r.body["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g["last_msg_id"] == 2))
    };
    assert!(
        reported(&late) || reported(&next),
        "message 2 reached bob's feed: {:?} then {:?}",
        late.body,
        next.body
    );
    let pulled = a.list_messages("bob", group, "?after_msg_id=1").await;
    assert_eq!(pulled.body["messages"][0]["content"], "untold");
}

/// Waits until one session on the test's database, holding a transaction id, waits for a row
/// lock: a write that has begun and cannot commit yet. (Row locks only: a commit's brief wait
/// for the NOTIFY queue is a lock wait too.)
async fn until_a_begun_write_waits_for_a_row_lock(app: &TestApp) {
    // On Citus the write waits on the worker that holds the row: the cluster-wide view of
    // lock waits shows it.
    let query = if app.on_citus().await {
        "SELECT DISTINCT CAST(w.waiting_gpid AS TEXT) AS value FROM citus_lock_waits w \
         JOIN citus_stat_activity a ON a.global_pid = w.waiting_gpid \
         WHERE a.datname = current_database()"
    } else {
        "SELECT CAST(backend_xid AS TEXT) AS value FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock' \
         AND wait_event IN ('transactionid', 'tuple') AND backend_xid IS NOT NULL"
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let xids = app.postgres_values(query).await;
        match xids.len() {
            0 => assert!(
                Instant::now() < deadline,
                "no write with a transaction id waits for a row lock after 30 s"
            ),
            1 => return,
            _ => panic!("one write should wait, not {xids:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// PostgreSQL: a message whose transaction began first but commits last (the sender's
/// membership row, which a send moves after storing the message, was locked meanwhile) is not
/// lost between two polls: the poll that reports the later message ends its window with the
/// earlier one still in progress, and the next poll reports it.
async fn a_message_committing_after_a_later_one_is_reported_by_the_next_poll() {
    let app = spawn_app(Engine::Postgres).await;
    let early = app.group_with("alice", &["bob"]).await;
    let late = app.group_with("alice", &["bob"]).await;
    let cursor = app.cursor("bob", "/v1/sync").await;
    let lock = format!(
        "SELECT user_id FROM group_members WHERE group_id = {early} AND user_id = 'alice' \
         FOR UPDATE"
    );
    let held = app.transaction_held(&lock).await;

    let (blocked_send, first_poll) =
        tokio::join!(app.send("alice", early, "c-early", "began first"), async {
            until_a_begun_write_waits_for_a_row_lock(&app).await;
            app.send_ok("alice", late, "committed first").await;
            // Waits for the committed message's publication, which follows its answer.
            let poll = app
                .poll_sync("bob", &format!("?cursor={cursor}&timeout_s=5"))
                .await;
            held.commit().await;
            poll
        });
    assert_eq!(blocked_send.status, 201, "{:?}", blocked_send.body);
    assert_eq!(first_poll.status, 200, "{:?}", first_poll.body);
    assert_eq!(
        synced_groups(&first_poll.body),
        [(late, 1)],
        "the poll before the commit sees only the message that committed"
    );

    let next = first_poll.body["cursor"].as_str().expect("cursor");
    let second_poll = app
        .poll_sync("bob", &format!("?cursor={next}&timeout_s=5"))
        .await;
    assert_eq!(second_poll.status, 200, "{:?}", second_poll.body);
    assert_eq!(
        synced_groups(&second_poll.body),
        [(early, 1)],
        "the message that committed last comes with the next poll"
    );
}

/// PostgreSQL: the same for receipts: an ack whose transaction began first but commits last
/// (the cursor of the reader's device, which an ack moves after the reader's membership row,
/// was locked meanwhile) reaches the sender with the next poll. The later ack goes through a
/// second instance: acks arriving together on one instance share a statement, so there it
/// would wait for the first.
async fn an_ack_committing_after_a_later_one_is_reported_by_the_next_poll() {
    let app = spawn_app(Engine::Postgres).await;
    let second = app.second_instance().await;
    let other = app.via(&second);
    let early = app.group_with("alice", &["bob"]).await;
    let late = app.group_with("alice", &["carol"]).await;
    let seen = app.send_ok("alice", early, "to bob").await;
    let ack = app
        .ack("bob#phone", early, json!({"last_ack_msg_id": seen}))
        .await;
    assert_eq!(ack.status, 200, "{:?}", ack.body);
    let early_msg = app.send_ok("alice", early, "to bob again").await;
    let late_msg = app.send_ok("alice", late, "to carol").await;
    let cursor = app.cursor("alice", "/v1/receipts").await;
    let lock = format!(
        "SELECT user_id FROM device_cursors WHERE group_id = {early} AND user_id = 'bob' \
         AND device_id = 'phone' FOR UPDATE"
    );
    let held = app.transaction_held(&lock).await;

    let (blocked_ack, first_poll) = tokio::join!(
        app.ack("bob#phone", early, json!({"last_ack_msg_id": early_msg})),
        async {
            until_a_begun_write_waits_for_a_row_lock(&app).await;
            let ack = other
                .ack("carol", late, json!({"last_ack_msg_id": late_msg}))
                .await;
            assert_eq!(ack.status, 200, "{:?}", ack.body);
            // Waits for the committed ack's publication, which follows its answer.
            let poll = app
                .poll_receipts("alice", &format!("?cursor={cursor}&timeout_s=5"))
                .await;
            held.commit().await;
            poll
        }
    );
    assert_eq!(blocked_ack.status, 200, "{:?}", blocked_ack.body);
    assert_eq!(first_poll.status, 200, "{:?}", first_poll.body);
    assert_eq!(
        receipt_changes(&first_poll.body),
        [(late, late_msg, 1)],
        "the poll before the commit sees only the ack that committed"
    );

    let next = first_poll.body["cursor"].as_str().expect("cursor");
    let second_poll = app
        .poll_receipts("alice", &format!("?cursor={next}&timeout_s=5"))
        .await;
    assert_eq!(second_poll.status, 200, "{:?}", second_poll.body);
    assert_eq!(
        receipt_changes(&second_poll.body),
        [(early, early_msg, 1)],
        "the ack that committed last comes with the next poll"
    );
}

/// The changes of a `/v1/receipts` answer, as (group_id, msg_id, read_count).
pub(crate) fn receipt_changes(answer: &Value) -> Vec<(i64, i64, i64)> {
    answer["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let field = |name: &str| c[name].as_i64().unwrap_or(-1);
            (field("group_id"), field("msg_id"), field("read_count"))
        })
        .collect()
}

/// The groups of a `/v1/sync` answer, as (group_id, last_msg_id).
pub(crate) fn synced_groups(answer: &Value) -> Vec<(i64, i64)> {
    answer["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            let field = |name: &str| g[name].as_i64().unwrap_or(-1);
            (field("group_id"), field("last_msg_id"))
        })
        .collect()
}

/// A window of changes larger than a page comes page by page: each page's cursor continues
/// the same window, so what commits meanwhile waits for the next one, and the last page's
/// cursor starts it.
async fn sync_hands_out_a_window_page_by_page_then_what_came_after(app: TestApp) {
    let (one, two, three) = (
        app.group_with("alice", &["bob"]).await,
        app.group_with("alice", &["bob"]).await,
        app.group_with("alice", &["bob"]).await,
    );
    let cursor = app.cursor("bob", "/v1/sync").await;
    app.send_ok("alice", one, "first").await;
    app.send_ok("alice", two, "second").await;
    let page =
        |cursor: &str, timeout_s: u64| format!("?cursor={cursor}&limit=1&timeout_s={timeout_s}");

    let first = app.poll_sync("bob", &page(&cursor, 0)).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(synced_groups(&first.body), [(one, 1)]);
    assert_eq!(first.body["has_more"], true);

    // Committed after the window's end: not on its second page.
    app.send_ok("alice", three, "third").await;
    app.send_ok("alice", one, "fourth").await;
    let next = first.body["cursor"].as_str().expect("cursor");
    let second = app.poll_sync("bob", &page(next, 0)).await;
    assert_eq!(synced_groups(&second.body), [(two, 1)]);
    assert_eq!(second.body["has_more"], false);

    let next = second.body["cursor"].as_str().expect("cursor");
    let third = app.poll_sync("bob", &page(next, 5)).await;
    assert_eq!(
        synced_groups(&third.body),
        [(one, 2)],
        "the next window, in group order"
    );
    assert_eq!(third.body["has_more"], true);
    let next = third.body["cursor"].as_str().expect("cursor");
    let fourth = app.poll_sync("bob", &page(next, 5)).await;
    assert_eq!(synced_groups(&fourth.body), [(three, 1)]);
    assert_eq!(fourth.body["has_more"], false);

    let next = fourth.body["cursor"].as_str().expect("cursor");
    let quiet = app.poll_sync("bob", &page(next, 0)).await;
    assert_eq!(synced_groups(&quiet.body), [], "nothing repeated");
}

/// The same for receipts: the messages of a window come page by page in (group, message)
/// order, each with its counts as they are when the page is read; acks committed meanwhile
/// come with the next window, even those covering messages after the page.
async fn receipts_hand_out_a_window_page_by_page_then_what_came_after(app: TestApp) {
    let group = app.group_with("alice", &["bob", "carol"]).await;
    let first_msg = app.send_ok("alice", group, "first").await;
    let second_msg = app.send_ok("alice", group, "second").await;
    let cursor = app.cursor("alice", "/v1/receipts").await;
    let ack = |user: &'static str, upto: i64| {
        let app = &app;
        async move {
            let acked = app.ack(user, group, json!({"last_ack_msg_id": upto})).await;
            assert_eq!(acked.status, 200, "{:?}", acked.body);
        }
    };
    ack("bob", second_msg).await;
    let page = |cursor: &str| format!("?cursor={cursor}&limit=1&timeout_s=5");

    let first = app.poll_receipts("alice", &page(&cursor)).await;
    assert_eq!(first.status, 200, "{:?}", first.body);
    assert_eq!(receipt_changes(&first.body), [(group, first_msg, 1)]);
    assert_eq!(first.body["has_more"], true);

    // After the window's end: a third message, and carol's ack of all three.
    let third_msg = app.send_ok("alice", group, "third").await;
    ack("carol", third_msg).await;
    let mut next = first.body["cursor"].as_str().expect("cursor").to_owned();
    let mut pages = Vec::new();
    for _ in 0..4 {
        let answer = app.poll_receipts("alice", &page(&next)).await;
        assert_eq!(answer.status, 200, "{:?}", answer.body);
        pages.push((
            receipt_changes(&answer.body),
            answer.body["has_more"] == true,
        ));
        next = answer.body["cursor"].as_str().expect("cursor").to_owned();
    }
    assert_eq!(
        pages,
        [
            (vec![(group, second_msg, 2)], false),
            (vec![(group, first_msg, 2)], true),
            (vec![(group, second_msg, 2)], true),
            (vec![(group, third_msg, 1)], false),
        ],
        "the window's last page (counts as read then), then carol's ack in the next window"
    );
}
