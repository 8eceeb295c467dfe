//! Rows written per request, measured by diffing the tables around single requests: sends,
//! acks that move the cursor and acks that repeat it, batch acks.

mod snapshot;

use std::future::Future;

use chorus::db::AnyConnection;
use serde_json::{json, Value};

use crate::requests::expect_empty;
use crate::seed::{seed_group, seed_messages, users};
use crate::server::BenchServer;
use crate::{BATCH_ACK_GROUPS, CONTENT, SEND_GROUP_MEMBERS};
use snapshot::snapshot;
pub use snapshot::RowsWritten;

/// Requests per kind in the storage probe, each one diffed on its own.
const PROBE_OPS: usize = 20;

/// Runs `ops` requests one at a time, diffing the tables around each; fails loudly on an
/// unexpected status, since a failed request writes nothing and would skew the count.
async fn measure_rows<F, Fut>(conn: &mut AnyConnection, ops: usize, op: F) -> RowsWritten
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<u64, String>>,
{
    let mut rows = RowsWritten::default();
    for i in 0..ops {
        let before = snapshot(conn);
        op(i)
            .await
            .unwrap_or_else(|e| panic!("storage probe request {i} failed: {e}"));
        rows.add(&before, &snapshot(conn));
    }
    rows
}

/// The rows each kind of request writes, by kind, for the report's storage table.
pub async fn bench(server: &BenchServer, conn: &mut AnyConnection) -> Vec<(String, RowsWritten)> {
    let mut written = Vec::new();
    eprintln!("storage: diffing tables around single requests");
    let members = users("probe", SEND_GROUP_MEMBERS);
    let group = seed_group(conn, "probe", &members);
    let tokens = server.tokens(&members);
    let http = &server.http;
    let send_path = format!("/v1/groups/{group}/messages");
    let sends = measure_rows(conn, PROBE_OPS, |i| {
        // Senders rotate, so a sender's cursor row is not the same row every time.
        let body = json!({"client_msg_id": format!("probe-{i}"), "content": CONTENT});
        expect_empty(http.post(&send_path, &tokens[i % tokens.len()], &body), 201)
    })
    .await;
    written.push((format!("send to a group of {SEND_GROUP_MEMBERS}"), sends));

    let ack_path = format!("/v1/groups/{group}/ack");
    let reader = &tokens[tokens.len() - 1];
    let acks = measure_rows(conn, PROBE_OPS, |i| {
        expect_empty(
            http.post(&ack_path, reader, &json!({"last_ack_msg_id": i + 1})),
            200,
        )
    })
    .await;
    written.push(("ack that moves the cursor".to_owned(), acks));
    let repeats = measure_rows(conn, PROBE_OPS, |_| {
        expect_empty(
            http.post(&ack_path, reader, &json!({"last_ack_msg_id": PROBE_OPS})),
            200,
        )
    })
    .await;
    written.push(("ack repeating the cursor".to_owned(), repeats));

    let batch_members = vec!["probe-batch-owner".to_owned(), "probe-batcher".to_owned()];
    let batch_groups: Vec<i64> = (0..BATCH_ACK_GROUPS)
        .map(|_| {
            let g = seed_group(conn, "probe batch", &batch_members);
            seed_messages(conn, g, "probe-batch-owner", PROBE_OPS);
            g
        })
        .collect();
    let batcher = server.token("probe-batcher");
    let batches = measure_rows(conn, PROBE_OPS, |i| {
        let acks: Vec<Value> = batch_groups
            .iter()
            .map(|g| json!({"group_id": g, "last_ack_msg_id": i + 1}))
            .collect();
        expect_empty(
            http.post("/v1/acks", &batcher, &json!({ "acks": acks })),
            200,
        )
    })
    .await;
    written.push((format!("POST /v1/acks, {BATCH_ACK_GROUPS} groups"), batches));
    written
}
