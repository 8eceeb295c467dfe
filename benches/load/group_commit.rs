//! Group commit: sends against the stack's own ceiling, in one run: on SQLite with one commit
//! per write and with the writer lane grouping the writes that queue during a flush; on
//! PostgreSQL with every send a transaction of its own, and with the sends that queue for a
//! group sharing one transaction.
//!
//! The ceiling is a trivial-insert endpoint on the same stack (actix-web with the server's
//! HTTP settings, the same `Db` and its write path, the same engine and durability), served
//! by the bench itself: it is not part of the API. Each variant gets a fresh server and a
//! ceiling server on the server's database; the variants alternate, twice, so a drift of the
//! machine's load shows up as a difference between rounds rather than between variants.
//! CPU per request is the whole bench process's (clients and server share it), read from
//! `/proc/self/stat`. Bytes written per request say what the flushes carry: on SQLite what the
//! process passed to write calls (`wchar` of `/proc/self/io`: WAL frames and checkpoints into
//! the database file; sockets write with `send`, which it does not count), on PostgreSQL the
//! WAL the cluster generated. The ceiling and the sends share one database, so a checkpoint
//! during a run also copies pages the run before it wrote to the WAL.

use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use chorus::db::{AnyConnection, Db};
use diesel::prelude::*;
use serde_json::json;

use crate::args::EngineSetup;
use crate::report::EngineReport;
use crate::requests::expect_empty;
use crate::runner::{measure_cpu, run_load, Measured};
use crate::seed::{seed_group, users};
use crate::server::BenchServer;
use crate::support::engine::Engine;
use crate::support::http::Http;
use crate::support::proc_status::bytes_written_by_self;
use crate::{CONCURRENCY, CONTENT, REQUEST_TIMEOUT};

const REQUESTS_PER_RUN: usize = 3000;
const ROUNDS: usize = 2;
const GROUP_MEMBERS: usize = 50;

/// One way of writing that the bench compares.
#[derive(Clone, Copy)]
struct Variant {
    name: &'static str,
    sqlite_write_batch: u64,
    shared_commits: bool,
    send_batch: u64,
}

/// SQLite: one commit per write, and group commit (the default). PostgreSQL: every send as a
/// transaction of its own, and sends to a group that arrive together sharing one transaction
/// (the default).
fn variants(setup: EngineSetup) -> Vec<Variant> {
    use chorus::config::defaults::{SEND_BATCH, SQLITE_WRITE_BATCH};
    let variant = |name, sqlite_write_batch, shared_commits, send_batch| Variant {
        name,
        sqlite_write_batch,
        shared_commits,
        send_batch,
    };
    match setup.engine() {
        Engine::Sqlite => vec![
            variant("one commit per write", 1, false, 1),
            variant("group commit", SQLITE_WRITE_BATCH, true, SEND_BATCH),
        ],
        Engine::Postgres => vec![
            variant("a transaction per send", SQLITE_WRITE_BATCH, false, 1),
            variant(
                "sends share a transaction",
                SQLITE_WRITE_BATCH,
                true,
                SEND_BATCH,
            ),
        ],
    }
}

pub async fn bench(setup: EngineSetup, report: &mut EngineReport) {
    for round in 1..=ROUNDS {
        for variant in variants(setup) {
            let name = variant.name;
            eprintln!("group commit: round {round}, {name}");
            let adjust = move |s: &mut chorus::config::Settings| {
                s.sqlite_write_batch = variant.sqlite_write_batch;
                s.shared_commits = variant.shared_commits;
                s.send_batch = variant.send_batch;
            };
            let server = match BenchServer::start_with(setup, adjust).await {
                Ok(server) => server,
                Err(e) => return report.notes.push(format!("group commit skipped: {e}")),
            };
            run_variant(&server, &format!("{name}, round {round}"), report).await;
            server.stop().await;
        }
    }
    report.notes.push(
        "Group commit: the ceiling is a trivial insert (one row, one column) behind the same \
         actix-web settings and the same database write path as the API (a transaction per \
         write on PostgreSQL), in this process. CPU is the whole bench process's (client and \
         server) per request. KiB written per request: on SQLite the process's write calls \
         (WAL frames and checkpoints, which may copy pages the run before wrote; not the \
         sockets), on PostgreSQL the WAL generated."
            .into(),
    );
}

async fn run_variant(server: &BenchServer, variant: &str, report: &mut EngineReport) {
    let mut conn = server.direct_connection();
    create_ceiling_table(&mut conn);
    let ceiling = CeilingServer::start(server).await;
    for c in CONCURRENCY {
        let written = bytes_written(&mut conn);
        let (floor, floor_cpu) = measure_cpu(run_ceiling(&ceiling.http, c)).await;
        let floor_kib = kib_per_request(written, bytes_written(&mut conn), &floor);
        let members = users(&format!("gc{c}"), GROUP_MEMBERS);
        let group = seed_group(&mut conn, "group commit", &members);
        let written = bytes_written(&mut conn);
        let (sends, sends_cpu) = measure_cpu(run_sends(server, group, &members[..c])).await;
        let sends_kib = kib_per_request(written, bytes_written(&mut conn), &sends);
        report.group_commit_rows(
            variant,
            c,
            (&floor, floor_cpu, floor_kib),
            (&sends, sends_cpu, sends_kib),
        );
    }
    ceiling.stop().await;
}

async fn run_sends(server: &BenchServer, group: i64, senders: &[String]) -> Measured {
    let tokens = server.tokens(senders);
    let http = server.http.clone();
    http.warm_up(senders.len()).await;
    let path = format!("/v1/groups/{group}/messages");
    run_load(senders.len(), REQUESTS_PER_RUN, move |k, i| {
        let body = json!({"client_msg_id": format!("gc-{k}-{i}"), "content": CONTENT});
        expect_empty(http.post(&path, &tokens[k], &body), 201)
    })
    .await
}

async fn run_ceiling(http: &Http, clients: usize) -> Measured {
    let http = http.clone();
    http.warm_up(clients).await;
    run_load(clients, REQUESTS_PER_RUN, move |k, i| {
        let body = json!({"client_msg_id": format!("c-{k}-{i}"), "content": CONTENT});
        expect_empty(http.post("/ceiling", "", &body), 201)
    })
    .await
}

fn create_ceiling_table(conn: &mut AnyConnection) {
    let sql = match conn {
        AnyConnection::Sqlite(_) => {
            "CREATE TABLE IF NOT EXISTS bench_ceiling (id INTEGER PRIMARY KEY, note TEXT NOT NULL)"
        }
        AnyConnection::Postgresql(_) => {
            "CREATE TABLE IF NOT EXISTS bench_ceiling (id BIGSERIAL PRIMARY KEY, note TEXT NOT NULL)"
        }
    };
    diesel::sql_query(sql)
        .execute(conn)
        .expect("create the ceiling's table");
}

/// The trivial-insert endpoint, on the bench server's database and settings.
struct CeilingServer {
    http: Http,
    handle: actix_web::dev::ServerHandle,
}

#[derive(serde::Deserialize)]
struct Note {
    content: String,
}

async fn insert(db: web::Data<Db>, note: web::Json<Note>) -> HttpResponse {
    let content = note.into_inner().content;
    let stored = db
        .write(move |conn, _| {
            diesel::sql_query("INSERT INTO bench_ceiling (note) VALUES ($1)")
                .bind::<diesel::sql_types::Text, _>(content)
                .execute(conn)
        })
        .await;
    match stored {
        Ok(_) => HttpResponse::Created().finish(),
        Err(_) => HttpResponse::ServiceUnavailable().finish(),
    }
}

impl CeilingServer {
    async fn start(server: &BenchServer) -> CeilingServer {
        let db = web::Data::new(Db::connect(server.db_settings()).expect("the ceiling's pool"));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let port = listener.local_addr().expect("its address").port();
        // The server's HTTP settings (src/startup.rs), minus what a trivial route never needs.
        let running = HttpServer::new(move || {
            App::new()
                .app_data(db.clone())
                .route("/ceiling", web::post().to(insert))
        })
        .keep_alive(Duration::from_secs(
            chorus::config::defaults::KEEP_ALIVE_SECS,
        ))
        .h1_allow_half_closed(false)
        .disable_signals()
        .listen(listener)
        .expect("listen")
        .run();
        let handle = running.handle();
        tokio::spawn(running);
        CeilingServer {
            http: Http::new(format!("http://127.0.0.1:{port}"), REQUEST_TIMEOUT),
            handle,
        }
    }

    async fn stop(self) {
        self.handle.stop(true).await;
    }
}

/// What has been written so far, in bytes: on SQLite by this process's write calls (the WAL
/// and checkpoints; see [`bytes_written_by_self`]), on PostgreSQL to the cluster's WAL. None
/// when it cannot be read.
fn bytes_written(conn: &mut AnyConnection) -> Option<f64> {
    #[derive(QueryableByName)]
    struct Lsn {
        #[diesel(sql_type = diesel::sql_types::Double)]
        bytes: f64,
    }
    match conn {
        AnyConnection::Postgresql(c) => diesel::sql_query(
            "SELECT CAST(pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0') \
             AS DOUBLE PRECISION) AS bytes",
        )
        .get_result::<Lsn>(c)
        .ok()
        .map(|lsn| lsn.bytes),
        AnyConnection::Sqlite(_) => bytes_written_by_self().map(|b| b as f64),
    }
}

/// KiB written per successful request of `run`, as "12.3" or "n/a".
fn kib_per_request(before: Option<f64>, after: Option<f64>, run: &Measured) -> String {
    match (before, after) {
        (Some(before), Some(after)) => {
            format!("{:.1}", (after - before) / 1024.0 / run.ok.max(1) as f64)
        }
        _ => "n/a".into(),
    }
}

impl EngineReport {
    fn group_commit_rows(
        &mut self,
        variant: &str,
        c: usize,
        (floor, floor_cpu, floor_kib): (&Measured, f64, String),
        (sends, sends_cpu, sends_kib): (&Measured, f64, String),
    ) {
        let (floor_rate, send_rate) = (floor.rate(floor.ok), sends.rate(sends.ok));
        self.row(
            &format!("ceiling: trivial insert ({variant})"),
            c,
            floor,
            REQUESTS_PER_RUN,
            format!(
                "{floor_rate:.0} req/s, {floor_cpu:.2} ms CPU and {floor_kib} KiB written each"
            ),
        );
        self.row(
            &format!("send, one group ({variant})"),
            c,
            sends,
            REQUESTS_PER_RUN,
            format!(
                "{send_rate:.0} msgs/s = {:.2}× ceiling, {sends_cpu:.2} ms CPU and \
                 {sends_kib} KiB written each",
                send_rate / floor_rate.max(1e-9)
            ),
        );
        let ratio = send_rate / floor_rate.max(1e-9);
        self.key_numbers.push((
            format!("send/ceiling C={c} {variant}"),
            format!("{ratio:.2}"),
        ));
    }
}
