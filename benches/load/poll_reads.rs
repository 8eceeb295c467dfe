//! What one long-poll read costs: `/v1/sync` and `/v1/receipts` asked with `timeout_s=0`, so
//! each request is one registration and one read of its feed and never waits. The reads that
//! find news answer from the same cursor every time (the news stays after it), so every
//! request does the same work. One client: a user's polls are bounded per user (a second
//! client of the same user would be refused with 429 beyond the bound), and what a read costs
//! is its statements and their round trips, which one client shows best.

use std::sync::Arc;

use chorus::db::AnyConnection;
use serde_json::json;

use crate::report::EngineReport;
use crate::requests::{expect_empty, expect_json};
use crate::runner::run_load;
use crate::seed::{seed_group, seed_messages};
use crate::server::BenchServer;
use crate::support::scratch_db::analyze;

/// The polling member's groups, each shared with the sender.
const POLL_GROUPS: usize = 20;
const POLL_REQUESTS_PER_RUN: usize = 3000;

/// Polls of `path` with `cursor` and `timeout_s=0`, one after another.
async fn run_polls(
    server: &BenchServer,
    report: &mut EngineReport,
    what: &str,
    user: &str,
    path: &str,
    cursor: &str,
) {
    let token = Arc::new(server.token(user));
    let url = Arc::new(format!("{path}?cursor={cursor}&timeout_s=0"));
    eprintln!("poll reads: {what}");
    server.http.warm_up(1).await;
    let http = server.http.clone();
    let m = run_load(1, POLL_REQUESTS_PER_RUN, move |_, _| {
        expect_empty(http.get(&url, &token), 200)
    })
    .await;
    let rate = m.rate(m.ok);
    report.row(
        what,
        1,
        &m,
        POLL_REQUESTS_PER_RUN,
        format!("{rate:.0} polls/s"),
    );
    let short = what.trim_start_matches("poll read: ");
    report.latency_key(format!("poll read p50/p99 ms, {short}"), &m);
}

/// The feed cursor `user` gets from `path` without one: the position "now".
async fn cursor_now(server: &BenchServer, user: &str, path: &str) -> String {
    let token = server.token(user);
    let answer = expect_json(server.http.get(path, &token), 200)
        .await
        .unwrap_or_else(|e| panic!("a cursor from {path}: {e}"));
    answer["cursor"]
        .as_str()
        .unwrap_or_else(|| panic!("{path} answered without a cursor: {answer}"))
        .to_owned()
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let (sender, member) = ("poll-sender", "poll-member");
    eprintln!("poll reads: seeding {POLL_GROUPS} groups");
    let groups: Vec<i64> = (0..POLL_GROUPS)
        .map(|i| seed_group(conn, &format!("polls {i}"), &[sender.into(), member.into()]))
        .collect();
    for group in &groups {
        seed_messages(conn, *group, sender, 3);
    }
    analyze(conn);

    // The news: a message in one group, and the member's ack of it (which also covers the
    // three seeded before it, ids 1-3 of a new group: hence 4 messages of news for the sender).
    // The member's own ack is no news to the member's own device.
    let before_news = cursor_now(server, member, "/v1/sync").await;
    let receipts_before_ack = cursor_now(server, sender, "/v1/receipts").await;
    let news = json!({"client_msg_id": "poll-news", "content": "news"});
    let path = format!("/v1/groups/{}/messages", groups[0]);
    expect_empty(server.http.post(&path, &server.token(sender), &news), 201)
        .await
        .unwrap_or_else(|e| panic!("the sender's message: {e}"));
    let ack = json!({"last_ack_msg_id": 4});
    let path = format!("/v1/groups/{}/ack", groups[0]);
    expect_empty(server.http.post(&path, &server.token(member), &ack), 200)
        .await
        .unwrap_or_else(|e| panic!("the member's ack: {e}"));
    let quiet = cursor_now(server, member, "/v1/sync").await;

    // Each run's answer holds what its name says, or its numbers would measure something else.
    for (user, path, cursor, field, expected) in [
        (member, "/v1/sync", &quiet, "groups", 0),
        (member, "/v1/sync", &before_news, "groups", 1),
        (sender, "/v1/receipts", &receipts_before_ack, "changes", 4),
    ] {
        let url = format!("{path}?cursor={cursor}&timeout_s=0");
        let answer = expect_json(server.http.get(&url, &server.token(user)), 200)
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let items = answer[field].as_array().map_or(0, Vec::len);
        assert_eq!(items, expected, "{path} answered {answer}");
    }

    let runs = [
        (
            "poll read: /v1/sync, nothing new (member of 20 groups)",
            member,
            "/v1/sync",
            &quiet,
        ),
        (
            "poll read: /v1/sync, one group with news",
            member,
            "/v1/sync",
            &before_news,
        ),
        (
            "poll read: /v1/receipts, one ack with news of 4 messages",
            sender,
            "/v1/receipts",
            &receipts_before_ack,
        ),
    ];
    for (what, user, path, cursor) in runs {
        run_polls(server, report, what, user, path, cursor).await;
    }
}
