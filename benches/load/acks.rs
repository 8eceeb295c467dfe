//! Acks: cursors moved one group per request, and twenty groups per `POST /v1/acks`; on
//! PostgreSQL also a transaction per ack against acks sharing transactions, side by side.

use std::sync::Arc;

use chorus::config::defaults::ACK_BATCH;
use chorus::db::AnyConnection;
use serde_json::{json, Value};

use crate::args::EngineSetup;
use crate::report::EngineReport;
use crate::requests::expect_empty;
use crate::runner::{measure_cpu, run_load, Measured};
use crate::seed::{seed_group, seed_messages, users};
use crate::server::BenchServer;
use crate::support::engine::Engine;
use crate::{BATCH_ACK_GROUPS, CONCURRENCY};

const ACKS_PER_RUN: usize = 3000;
const BATCH_ACK_REQUESTS_PER_RUN: usize = 300;
const ROUNDS: usize = 2;

/// Client k acks 1, 2, 3, … in one group, as its own member, so every ack moves a cursor.
async fn run_group_acks(server: &BenchServer, group: i64, ackers: &[String]) -> Measured {
    let tokens = server.tokens(ackers);
    let http = server.http.clone();
    http.warm_up(ackers.len()).await;
    run_load(ackers.len(), ACKS_PER_RUN, move |k, i| {
        let body = json!({"last_ack_msg_id": i + 1});
        expect_empty(
            http.post(&format!("/v1/groups/{group}/ack"), &tokens[k], &body),
            200,
        )
    })
    .await
}

/// Client k acks all `groups` in each request, at i + 1 in each.
async fn run_batch_acks(server: &BenchServer, groups: &[i64], ackers: &[String]) -> Measured {
    let tokens = server.tokens(ackers);
    let http = server.http.clone();
    let groups = Arc::new(groups.to_vec());
    http.warm_up(ackers.len()).await;
    run_load(ackers.len(), BATCH_ACK_REQUESTS_PER_RUN, move |k, i| {
        let acks: Vec<Value> = groups
            .iter()
            .map(|g| json!({"group_id": g, "last_ack_msg_id": i + 1}))
            .collect();
        let request = http.post("/v1/acks", &tokens[k], &json!({ "acks": acks }));
        let n = groups.len() as u64;
        async move { expect_empty(request, 200).await.map(|_| n) }
    })
    .await
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    run_acks(server, conn, report, "").await;
}

/// PostgreSQL: every ack as a transaction of its own, and acks that arrive together sharing a
/// transaction (the default), alternating twice in one run, each on a fresh server.
pub async fn bench_paths(setup: EngineSetup, report: &mut EngineReport) {
    if setup.engine() != Engine::Postgres {
        return report
            .notes
            .push("Ack paths: PostgreSQL only (SQLite has one path).".into());
    }
    for round in 1..=ROUNDS {
        for (name, shared_commits, ack_batch) in [
            ("a transaction per ack", false, 1),
            ("acks share a transaction", true, ACK_BATCH),
        ] {
            eprintln!("ack paths: round {round}, {name}");
            let adjust = move |s: &mut chorus::config::Settings| {
                s.shared_commits = shared_commits;
                s.ack_batch = ack_batch;
            };
            let server = match BenchServer::start_with(setup, adjust).await {
                Ok(server) => server,
                Err(e) => return report.notes.push(format!("ack paths skipped: {e}")),
            };
            let mut conn = server.direct_connection();
            run_acks(
                &server,
                &mut conn,
                report,
                &format!(" ({name}, round {round})"),
            )
            .await;
            drop(conn);
            server.stop().await;
        }
    }
    report.notes.push(
        "Ack paths: CPU is the whole bench process's (client and server) per request.".into(),
    );
}

/// Both ack workloads, rows named with `variant`. Each client count acks as users of its own,
/// so the C = 32 run does not start from cursors the C = 1 run already moved (an ack that
/// moves nothing writes nothing and would flatter the numbers).
async fn run_acks(
    server: &BenchServer,
    conn: &mut AnyConnection,
    report: &mut EngineReport,
    variant: &str,
) {
    let ackers: Vec<Vec<String>> = CONCURRENCY
        .iter()
        .map(|c| users(&format!("acker{c}"), *c))
        .collect();
    let mut members = vec!["ack-owner".to_owned()];
    members.extend(ackers.iter().flatten().cloned());
    let group = seed_group(conn, "ack", &members);
    seed_messages(conn, group, "ack-owner", ACKS_PER_RUN);
    for (c, ackers) in CONCURRENCY.iter().zip(&ackers) {
        eprintln!("ack: one group per request, C={c}{variant}");
        let m = measure_cpu(run_group_acks(server, group, ackers)).await;
        report.ack_row(*c, &m, variant);
    }

    let batchers: Vec<Vec<String>> = CONCURRENCY
        .iter()
        .map(|c| users(&format!("batch{c}"), *c))
        .collect();
    let mut members = vec!["batch-owner".to_owned()];
    members.extend(batchers.iter().flatten().cloned());
    let groups: Vec<i64> = (0..BATCH_ACK_GROUPS)
        .map(|_| {
            let group = seed_group(conn, "batch ack", &members);
            seed_messages(conn, group, "batch-owner", BATCH_ACK_REQUESTS_PER_RUN);
            group
        })
        .collect();
    for (c, batchers) in CONCURRENCY.iter().zip(&batchers) {
        eprintln!("ack: POST /v1/acks with {BATCH_ACK_GROUPS} groups, C={c}{variant}");
        let m = measure_cpu(run_batch_acks(server, &groups, batchers)).await;
        report.batch_ack_row(*c, &m, variant);
    }
}

impl EngineReport {
    fn ack_row(&mut self, c: usize, (m, cpu_ms): &(Measured, f64), variant: &str) {
        let rate = m.rate(m.ok);
        self.row(
            &format!("ack: POST /groups/{{id}}/ack, cursor +1{variant}"),
            c,
            m,
            ACKS_PER_RUN,
            format!("{rate:.0} acks/s, CPU {cpu_ms:.2} ms/req"),
        );
        self.key(format!("acks/s C={c}{variant}"), rate);
    }

    fn batch_ack_row(&mut self, c: usize, (m, cpu_ms): &(Measured, f64), variant: &str) {
        let rate = m.rate(m.items);
        let throughput = format!(
            "{rate:.0} group-acks/s ({:.0} req/s), CPU {cpu_ms:.2} ms/req",
            m.rate(m.ok)
        );
        self.row(
            &format!("ack: POST /v1/acks, {BATCH_ACK_GROUPS} groups each{variant}"),
            c,
            m,
            BATCH_ACK_REQUESTS_PER_RUN,
            throughput,
        );
        self.key(format!("group-acks/s (batch) C={c}{variant}"), rate);
    }
}
