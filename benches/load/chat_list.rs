//! The chat list: one user in 500 groups, listed by latest activity and by group id, first
//! page and whole list.

use std::sync::Arc;

use chorus::db::AnyConnection;
use rand::{Rng, SeedableRng};

use crate::report::EngineReport;
use crate::requests::{expect_empty, expect_json};
use crate::runner::{run_load, Measured};
use crate::seed::{seed_group, seed_messages};
use crate::server::BenchServer;
use crate::support::http::Http;
use crate::support::scratch_db::analyze;
use crate::CONCURRENCY;

/// The chat list: one user in this many groups, each with a few messages.
const CHAT_LIST_GROUPS: usize = 500;
const CHAT_LIST_MESSAGES_PER_GROUP: usize = 3;
const CHAT_LIST_REQUESTS_PER_RUN: usize = 1000;

/// One reader in [`CHAT_LIST_GROUPS`] groups, each with messages from another member; the
/// groups get their messages in random order, so activity order differs from id order.
fn seed_chat_list(conn: &mut AnyConnection, reader: &str) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut groups: Vec<(i64, String)> = (0..CHAT_LIST_GROUPS)
        .map(|i| {
            let friend = format!("friend-{i}");
            let group = seed_group(conn, &format!("chat {i}"), &[friend.clone(), reader.into()]);
            (group, friend)
        })
        .collect();
    for i in (1..groups.len()).rev() {
        groups.swap(i, rng.random_range(0..=i));
    }
    for (group, friend) in &groups {
        seed_messages(conn, *group, friend, CHAT_LIST_MESSAGES_PER_GROUP);
    }
    analyze(conn);
}

/// Every page of the reader's chat list by latest activity, 200 groups a page; the items are
/// the groups listed.
async fn read_whole_chat_list(http: &Http, token: &str) -> Result<u64, String> {
    let mut listed = 0;
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("?order=recent&limit=200&cursor={c}"),
            None => "?order=recent&limit=200".to_owned(),
        };
        let page = expect_json(http.get(&format!("/v1/me/groups{query}"), token), 200).await?;
        listed += page["groups"].as_array().map_or(0, Vec::len) as u64;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return Ok(listed),
        }
    }
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let reader = "chat-reader";
    eprintln!("chat list: seeding {CHAT_LIST_GROUPS} groups");
    seed_chat_list(conn, reader);
    let token = Arc::new(server.token(reader));
    let http = server.http.clone();
    for (what, query) in [
        (
            "chat list: first page by activity (50 of 500 groups)",
            "?order=recent&limit=50",
        ),
        (
            "chat list: first page by group id (50 of 500 groups)",
            "?limit=50",
        ),
    ] {
        for c in CONCURRENCY {
            eprintln!("chat list: {query}, C={c}");
            http.warm_up(c).await;
            let (http, token) = (http.clone(), token.clone());
            let path = format!("/v1/me/groups{query}");
            let m = run_load(c, CHAT_LIST_REQUESTS_PER_RUN, move |_, _| {
                expect_empty(http.get(&path, &token), 200)
            })
            .await;
            report.chat_list_row(what, c, &m, CHAT_LIST_REQUESTS_PER_RUN);
        }
    }
    eprintln!("chat list: all 500 groups by activity, C=1");
    let (http, token) = (http.clone(), token.clone());
    let whole = CHAT_LIST_REQUESTS_PER_RUN / 10;
    let m = run_load(1, whole, move |_, _| {
        let (http, token) = (http.clone(), token.clone());
        async move { read_whole_chat_list(&http, &token).await }
    })
    .await;
    report.chat_list_row(
        "chat list: all 500 groups by activity (3 pages of 200)",
        1,
        &m,
        whole,
    );
}

impl EngineReport {
    fn chat_list_row(&mut self, what: &str, c: usize, m: &Measured, planned: usize) {
        let rate = m.rate(m.ok);
        self.row(what, c, m, planned, format!("{rate:.0} lists/s"));
        let short = what.trim_start_matches("chat list: ");
        self.latency_key(format!("chat list p50/p99 ms, {short}, C={c}"), m);
    }
}
