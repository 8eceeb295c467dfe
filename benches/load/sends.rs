//! Sends: 3,000 messages over HTTP, by one client and by 32, into one shared group and into a
//! group per client; and the rows the timed sends added.

use std::future::Future;
use std::sync::Arc;

use chorus::db::AnyConnection;
use chorus::schema::{group_members, group_msgs};
use diesel::prelude::*;
use serde_json::json;

use crate::report::EngineReport;
use crate::requests::expect_empty;
use crate::runner::{run_load, Measured};
use crate::seed::{seed_group, users};
use crate::server::BenchServer;
use crate::{CONCURRENCY, CONTENT, SEND_GROUP_MEMBERS};

const SENDS_PER_RUN: usize = 3000;

/// Each client sends as its own user; `senders[k]` is client k's (group, user).
async fn run_sends(server: &BenchServer, senders: &[(i64, String)], tag: &str) -> Measured {
    let users: Vec<String> = senders.iter().map(|(_, u)| u.clone()).collect();
    let tokens = server.tokens(&users);
    let groups: Arc<Vec<i64>> = Arc::new(senders.iter().map(|(g, _)| *g).collect());
    let http = server.http.clone();
    let tag = tag.to_owned();
    http.warm_up(senders.len()).await;
    run_load(senders.len(), SENDS_PER_RUN, move |k, i| {
        let path = format!("/v1/groups/{}/messages", groups[k]);
        let body = json!({"client_msg_id": format!("{tag}-{k}-{i}"), "content": CONTENT});
        let request = http.post(&path, &tokens[k], &body);
        // 201: a new message. A 200 (duplicate) would be a bench bug and counts as an error.
        expect_empty(request, 201)
    })
    .await
}

/// Rows added to `group_msgs` and `group_members` while the timed sends ran (not seeding).
#[derive(Default)]
struct BulkGrowth {
    created: u64,
    msgs: i64,
    members: i64,
}

impl BulkGrowth {
    async fn around(
        &mut self,
        conn: &mut AnyConnection,
        run: impl Future<Output = Measured>,
    ) -> Measured {
        let before = table_counts(conn);
        let m = run.await;
        let after = table_counts(conn);
        self.created += m.ok;
        self.msgs += after.msgs - before.msgs;
        self.members += after.members - before.members;
        m
    }
}

pub async fn bench(server: &BenchServer, conn: &mut AnyConnection, report: &mut EngineReport) {
    let mut growth = BulkGrowth::default();
    for c in CONCURRENCY {
        let members = users(&format!("send{c}"), SEND_GROUP_MEMBERS);
        let group = seed_group(conn, "send: shared group", &members);
        let senders: Vec<(i64, String)> = members[..c].iter().map(|u| (group, u.clone())).collect();
        eprintln!("send: one shared group, C={c}");
        let m = growth
            .around(conn, run_sends(server, &senders, &format!("shared{c}")))
            .await;
        report.send_row(
            &format!("send, one shared group of {SEND_GROUP_MEMBERS}"),
            c,
            &m,
        );
    }
    // With C = 1 "a group per client" is the row above; only C = 32 differs.
    let c = 32;
    let senders: Vec<(i64, String)> = (0..c)
        .map(|k| {
            let members = users(&format!("own{k}"), SEND_GROUP_MEMBERS);
            (
                seed_group(conn, "send: own group", &members),
                members[0].clone(),
            )
        })
        .collect();
    eprintln!("send: a group per client, C={c}");
    let m = growth
        .around(conn, run_sends(server, &senders, "own"))
        .await;
    report.send_row(
        &format!("send, a group of {SEND_GROUP_MEMBERS} per client"),
        c,
        &m,
    );
    report.bulk_send_note(&growth);
}

/// Row counts of the two tables a send may grow.
#[derive(Clone, Copy)]
struct TableCounts {
    msgs: i64,
    members: i64,
}

fn table_counts(conn: &mut AnyConnection) -> TableCounts {
    TableCounts {
        msgs: group_msgs::table
            .count()
            .get_result(conn)
            .expect("count group_msgs"),
        members: group_members::table
            .count()
            .get_result(conn)
            .expect("count group_members"),
    }
}

impl EngineReport {
    fn send_row(&mut self, what: &str, c: usize, m: &Measured) {
        let rate = m.rate(m.items);
        self.row(what, c, m, SENDS_PER_RUN, format!("{rate:.0} msgs/s"));
        let shape = if what.contains("shared") {
            "shared"
        } else {
            "own"
        };
        self.key(format!("sends/s {shape} C={c}"), rate);
    }

    fn bulk_send_note(&mut self, growth: &BulkGrowth) {
        self.notes.push(format!(
            "Over all timed send runs: {} sends answered 201; meanwhile `group_msgs` grew by {} \
             rows ({:.3} per send) and `group_members` by {} rows.",
            growth.created,
            growth.msgs,
            growth.msgs as f64 / growth.created.max(1) as f64,
            growth.members,
        ));
    }
}
