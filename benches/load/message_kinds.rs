//! Message kinds: what mentions add to a send, and what change entries (edits) inside a
//! member's unread range add to reading their unread count.

use std::sync::Arc;

use chorus::db::AnyConnection;
use serde_json::{json, Value};

use crate::report::EngineReport;
use crate::requests::{expect_empty, expect_json};
use crate::runner::{run_load, Measured};
use crate::seed::{seed_edits, seed_group, seed_messages, users};
use crate::server::BenchServer;
use crate::support::http::Http;
use crate::support::scratch_db::analyze;
use crate::{CONCURRENCY, CONTENT};

const GROUP_MEMBERS: usize = 200;
const SENDS_PER_RUN: usize = 2000;
/// The reader's unread messages in each group of the unread runs.
const UNREAD: usize = 10_000;
/// Edits of earlier messages above the reader's read cursor, one group per figure.
const CHANGE_ENTRIES: [usize; 3] = [0, 100, 1000];
const READS_PER_RUN: usize = 1000;

/// The body fields each send variant adds to a plain message.
fn send_variants(members: &[String]) -> Vec<(&'static str, Value)> {
    vec![
        ("plain", json!({})),
        ("10 mentions", json!({"mentions": &members[1..11]})),
        ("50 mentions", json!({"mentions": &members[1..51]})),
        ("mention_all", json!({"mention_all": true})),
    ]
}

async fn run_sends(
    http: &Http,
    token: Arc<String>,
    group: i64,
    tag: String,
    extra: Value,
    c: usize,
) -> Measured {
    let http = http.clone();
    run_load(c, SENDS_PER_RUN, move |k, i| {
        let mut body = extra.clone();
        body["client_msg_id"] = json!(format!("{tag}-{k}-{i}"));
        body["content"] = json!(CONTENT);
        let path = format!("/v1/groups/{group}/messages");
        expect_empty(http.post(&path, &token, &body), 201)
    })
    .await
}

async fn bench_sends(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let members = users("kinds", GROUP_MEMBERS);
    let group = seed_group(conn, "kinds", &members);
    analyze(conn);
    // The owner sends every variant: only the owner may mention everyone.
    let token = Arc::new(server.token(&members[0]));
    for (what, extra) in send_variants(&members) {
        for c in CONCURRENCY {
            eprintln!("message kinds: send, {what}, C={c}");
            server.http.warm_up(c).await;
            let tag = format!("{what}-{c}").replace(' ', "-");
            let m = run_sends(&server.http, token.clone(), group, tag, extra.clone(), c).await;
            let what = format!("send to {GROUP_MEMBERS} members, {what}");
            let rate = m.rate(m.ok);
            report.row(&what, c, &m, SENDS_PER_RUN, format!("{rate:.0} sends/s"));
            report.latency_key(format!("{what} p50/p99 ms, C={c}"), &m);
        }
    }
}

/// One reader with [`UNREAD`] unread messages and `changes` edits of them in their unread
/// range; returns the reader.
fn seed_unread(conn: &mut AnyConnection, changes: usize) -> String {
    let (sender, reader) = (format!("writer-{changes}"), format!("reader-{changes}"));
    let group = seed_group(
        conn,
        &format!("unread {changes}"),
        &[sender.clone(), reader.clone()],
    );
    seed_messages(conn, group, &sender, UNREAD);
    seed_edits(conn, group, &sender, changes);
    analyze(conn);
    reader
}

async fn bench_unread(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    for changes in CHANGE_ENTRIES {
        eprintln!("message kinds: seeding {UNREAD} unread and {changes} edits");
        let reader = seed_unread(conn, changes);
        let token = Arc::new(server.token(&reader));
        let http = server.http.clone();
        let first = expect_json(http.get("/v1/me/groups", &token), 200).await;
        let unread = first.map(|page| page["groups"][0]["unread_count"].clone());
        assert_eq!(unread, Ok(json!(UNREAD)), "the reader's unread count");
        http.warm_up(1).await;
        let m = run_load(1, READS_PER_RUN, move |_, _| {
            expect_empty(http.get("/v1/me/groups", &token), 200)
        })
        .await;
        let what = format!("chat list, {UNREAD} unread with {changes} edits in range");
        let rate = m.rate(m.ok);
        report.row(&what, 1, &m, READS_PER_RUN, format!("{rate:.0} lists/s"));
        report.latency_key(format!("{what} p50/p99 ms"), &m);
    }
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    bench_sends(server, conn, report).await;
    bench_unread(server, conn, report).await;
}
