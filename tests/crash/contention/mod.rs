//! SQLite under 32 concurrent writers, and again with a writer from outside holding the write
//! lock: every request answers 2xx and the server never logs "database is locked".

mod findings;
mod outside_writer;
mod writers;

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::server::start_server;
use crate::support::client::ApiClient;
use crate::support::engine::Engine;
use crate::support::http::Reply;
use crate::support::scratch_db::ScratchDb;
use findings::Findings;

const WRITERS: usize = 32;
const WRITER_REQUESTS: usize = 3000;
const WRITER_GROUPS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_never_see_database_locked() {
    concurrent_writers(false).await
}

/// Another process holds a write transaction for 1 s while clients write. With a 5 s busy
/// timeout the expected behaviour is slower 2xx answers (or a 503 after a bounded wait), never
/// a 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_concurrent_writers_with_outside_writer_never_see_database_locked() {
    concurrent_writers(true).await
}

/// How one request ended, and when it started and ended relative to the run's start.
pub struct Outcome {
    kind: &'static str,
    /// None: the connection failed.
    status: Option<u16>,
    /// The error text when the connection failed.
    body: Value,
    started: Duration,
    ended: Duration,
}

impl Outcome {
    fn of(kind: &'static str, reply: Reply, started: Duration, ended: Duration) -> Outcome {
        let (status, body) = match reply {
            Reply::Answered(status, body) => (Some(status), body),
            Reply::Lost(e) => (None, Value::String(e)),
        };
        Outcome {
            kind,
            status,
            body,
            started,
            ended,
        }
    }
}

async fn concurrent_writers(with_outside_writer: bool) {
    let _serial = crate::SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let database = ScratchDb::for_test(Engine::Sqlite);
    let client = crate::support::http::client(Duration::from_secs(20));
    let mut server = start_server(dir.path(), database.url(), "server.log", &client).await;
    let api = ApiClient::with_client(client, server.base.clone());
    let users: Vec<String> = (0..WRITERS).map(|i| format!("w{i:02}")).collect();
    let others: Vec<&str> = users[1..].iter().map(String::as_str).collect();
    let mut groups = Vec::new();
    for g in 0..WRITER_GROUPS {
        groups.push(api.create_group(&users[0], &format!("g{g}"), &others).await);
    }

    let t0 = Instant::now();
    let outside = with_outside_writer.then(|| outside_writer::start(database.url().to_owned(), t0));
    let mut outcomes = writers::run(&api, &users, &groups, t0).await;
    let elapsed = t0.elapsed();
    let mut holds = outside.map(|h| h.join().expect("outside writer thread"));
    if let Some(holds) = holds.as_mut() {
        let (probes, hold) =
            outside_writer::quiet_probe(&api, database.url(), groups[0], &users, t0).await;
        outcomes.extend(probes);
        holds.push(hold);
    }
    let id_problems = findings::stored_id_problems(&api, &users[0], &groups, &outcomes).await;
    server.kill();

    let found = Findings::of(&outcomes, holds.as_deref(), &server.log());
    found.print(outcomes.len(), holds.as_deref(), elapsed);
    let probes = if with_outside_writer { 3 } else { 0 };
    found.assert_all_2xx_and_never_locked(outcomes.len(), probes);
    assert!(id_problems.is_empty(), "{id_problems:?}");
}
