//! Pulls: an offline member pulling 20,000 messages page by page (acking each page), and
//! random pages read by one client and by 32.

use std::time::Instant;

use chorus::db::AnyConnection;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::report::EngineReport;
use crate::requests::{expect_empty, expect_json};
use crate::runner::{run_load, Measured};
use crate::seed::{seed_group, seed_messages, users};
use crate::server::BenchServer;
use crate::support::http::Http;
use crate::{CONCURRENCY, TIME_LIMIT};

const PULL_GROUP_MESSAGES: usize = 20_000;
const PULL_PAGE_LIMIT: usize = 200;
const RANDOM_PULLS_PER_RUN: usize = 3000;
const RANDOM_PULL_LIMIT: usize = 50;

/// A group of [`PULL_GROUP_MESSAGES`] messages with one offline member and readers.
fn seed_pull_group(conn: &mut AnyConnection, readers: &[String]) -> i64 {
    let mut members = vec!["pull-owner".to_owned(), "offline".to_owned()];
    members.extend_from_slice(readers);
    let group = seed_group(conn, "pull", &members);
    let t0 = Instant::now();
    seed_messages(conn, group, "pull-owner", PULL_GROUP_MESSAGES);
    eprintln!(
        "pull: seeded {PULL_GROUP_MESSAGES} messages in {:.1} s (db layer)",
        t0.elapsed().as_secs_f64()
    );
    group
}

/// The offline pull: page after page (no `after_msg_id`: the server starts after the cursor),
/// each page acked before the next. Returns the page and ack measurements and whether the ids
/// came back exactly as 1..=N, with no gap and no repeat.
async fn offline_pull(http: &Http, token: &str, group: i64) -> (Measured, Measured, bool) {
    let mut pages = Measured::default();
    let mut acks = Measured::default();
    let mut next_expected = 1;
    let mut contiguous = true;
    let max_pages = PULL_GROUP_MESSAGES / PULL_PAGE_LIMIT + 5;
    let start = Instant::now();
    for _ in 0..max_pages {
        if start.elapsed() >= TIME_LIMIT {
            pages.hit_time_limit = true;
            break;
        }
        let path = format!("/v1/groups/{group}/messages?limit={PULL_PAGE_LIMIT}");
        let t0 = Instant::now();
        let page = expect_json(http.get(&path, token), 200).await;
        let took = t0.elapsed();
        let page = match page {
            Ok(page) => page,
            Err(label) => {
                pages.record(took, Err(label));
                continue;
            }
        };
        let ids: Vec<i64> = page["messages"]
            .as_array()
            .map(|ms| ms.iter().filter_map(|m| m["msg_id"].as_i64()).collect())
            .unwrap_or_default();
        pages.record(took, Ok(ids.len() as u64));
        for id in &ids {
            contiguous &= *id == next_expected;
            next_expected = id + 1;
        }
        let Some(last) = ids.last() else { break };
        let ack_path = format!("/v1/groups/{group}/ack");
        let t1 = Instant::now();
        let outcome = expect_empty(
            http.post(&ack_path, token, &json!({"last_ack_msg_id": last})),
            200,
        )
        .await;
        acks.record(t1.elapsed(), outcome);
        if page["has_more"] != Value::Bool(true) {
            break;
        }
    }
    pages.elapsed = start.elapsed();
    acks.elapsed = pages.elapsed;
    let complete = next_expected == PULL_GROUP_MESSAGES as i64 + 1;
    (pages, acks, contiguous && complete)
}

async fn random_pulls(server: &BenchServer, readers: &[String], group: i64, c: usize) -> Measured {
    let tokens = server.tokens(&readers[..c]);
    let http = server.http.clone();
    let max_after = (PULL_GROUP_MESSAGES - RANDOM_PULL_LIMIT) as i64;
    http.warm_up(c).await;
    run_load(c, RANDOM_PULLS_PER_RUN, move |k, i| {
        // Seeded per request: reproducible, and a StdRng is Send where ThreadRng is not.
        let mut rng = rand::rngs::StdRng::seed_from_u64((k * 1_000_003 + i) as u64);
        let after = rng.random_range(0..=max_after);
        let path =
            format!("/v1/groups/{group}/messages?after_msg_id={after}&limit={RANDOM_PULL_LIMIT}");
        let request = http.get(&path, &tokens[k]);
        async move {
            let page = expect_json(request, 200).await?;
            Ok(page["messages"].as_array().map_or(0, |ms| ms.len() as u64))
        }
    })
    .await
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let readers = users("reader", 32);
    let group = seed_pull_group(conn, &readers);
    eprintln!("pull: offline member, {PULL_GROUP_MESSAGES} messages");
    let token = server.token("offline");
    let (pages, acks, contiguous) = offline_pull(&server.http, &token, group).await;
    report.offline_pull_rows(&pages, &acks, contiguous);
    for c in CONCURRENCY {
        eprintln!("pull: random pages, C={c}");
        let m = random_pulls(server, &readers, group, c).await;
        report.random_pull_row(c, &m);
    }
}

impl EngineReport {
    fn offline_pull_rows(&mut self, pages: &Measured, acks: &Measured, contiguous: bool) {
        let msgs = pages.rate(pages.items);
        let planned = PULL_GROUP_MESSAGES.div_ceil(PULL_PAGE_LIMIT);
        let throughput = format!("{msgs:.0} msgs/s, {:.0} pages/s", pages.rate(pages.ok));
        self.row(
            &format!("offline pull of {PULL_GROUP_MESSAGES}: GET limit={PULL_PAGE_LIMIT}"),
            1,
            pages,
            planned,
            throughput,
        );
        self.row(
            "… and the ack after each page",
            1,
            acks,
            planned,
            "(in the line above)".into(),
        );
        self.key("pulled msgs/s (offline, +ack)".into(), msgs);
        self.notes.push(format!(
            "Offline pull: {} messages arrived, ids 1..={PULL_GROUP_MESSAGES} each exactly once: {}.",
            pages.items,
            if contiguous { "yes" } else { "NO" }
        ));
    }

    fn random_pull_row(&mut self, c: usize, m: &Measured) {
        let throughput = format!("{:.0} req/s, {:.0} msgs/s", m.rate(m.ok), m.rate(m.items));
        self.row(
            &format!("random page: GET after_msg_id=rand limit={RANDOM_PULL_LIMIT}"),
            c,
            m,
            RANDOM_PULLS_PER_RUN,
            throughput,
        );
        self.key(format!("random-pull msgs/s C={c}"), m.rate(m.items));
    }
}
