//! Load benchmark: the real Chorus server, in process on 127.0.0.1 port 0, driven over HTTP.
//!
//! ```sh
//! cargo bench --bench load -- [core|send|pull|ack|storage|chat-list|poll-reads|message-kinds|push|group-commit|ack-paths] [--engine sqlite|postgres|both]
//! ```
//!
//! Each engine gets a fresh database (a temporary SQLite file, or a PostgreSQL database
//! `chorus_bench_<random>` created from CHORUS_BENCH_DATABASE_URL and dropped afterwards) and
//! its own server. SQLite runs twice, with `synchronous = FULL` (the default) and `NORMAL`.
//! Fixtures (groups, and the messages that pulls and acks need) are seeded through the db
//! layer (`chorus::db::group::group_lifecycle::create_group`, `chorus::db::message::messages::send`) on one direct
//! connection, because seeding 20,000 messages over HTTP would take longer than the runs;
//! everything measured goes through HTTP. Every load loop is bounded by a count and by
//! [`TIME_LIMIT`]. Markdown goes to stdout, progress to stderr.
//!
//! One module per scenario (sends, pulls, acks, storage, chat_list, poll_reads, message_kinds,
//! push, group_commit); what they share: the command line (args), the server under test (server),
//! seeding through the db layer (seed), the load runner (runner), request outcomes
//! (requests), the report (report) and what it ran on (environment), besides the harness in
//! tests/support.

#[path = "../../tests/support/mod.rs"]
mod support;

mod acks;
mod args;
mod chat_list;
mod environment;
mod group_commit;
mod message_kinds;
mod poll_reads;
mod pulls;
mod push;
mod push_outage;
mod report;
mod requests;
mod runner;
mod seed;
mod sends;
mod server;
mod storage;

use std::time::Duration;

use args::{parse_args, EngineSetup, Scenario, USAGE};
use report::{print_summary, EngineReport};
use server::BenchServer;

/// Every load loop stops at its count or at this wall-clock limit, whichever comes first.
const TIME_LIMIT: Duration = Duration::from_secs(20);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const CONCURRENCY: [usize; 2] = [1, 32];
/// Members of each group the send scenarios (and the storage probe) send to.
const SEND_GROUP_MEMBERS: usize = 50;
/// Groups one `POST /v1/acks` acks in, in the ack scenario and the storage probe.
const BATCH_ACK_GROUPS: usize = 20;
/// 100 bytes, the size of a typical chat line.
const CONTENT: &str =
    "The quick brown fox jumps over the lazy dog; lunch at noon? Bring the slides and the drafts, please!";

// Two client threads on a two-core machine: the client shares the cores with the server, as
// an in-process benchmark must; the tables say so.
#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = match parse_args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    println!("# Chorus load benchmark ({:?})\n", args.scenario);
    println!("{}", environment::machine_description());
    let mut summaries = Vec::new();
    for setup in args.engines {
        eprintln!("== {}", setup.title());
        match bench_engine(setup, args.scenario).await {
            Ok(report) => {
                report.print();
                summaries.push((setup, report.key_numbers));
            }
            Err(skip) => println!("## {}\n\nSkipped: {skip}\n", setup.title()),
        }
    }
    print_summary(&summaries);
}

async fn bench_engine(setup: EngineSetup, scenario: Scenario) -> Result<EngineReport, String> {
    let server = BenchServer::start(setup).await?;
    let mut conn = server.direct_connection();
    let mut report = EngineReport::new(setup, environment::engine_description(&mut conn));
    if scenario.includes(Scenario::Send) {
        sends::bench(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Pull) {
        pulls::bench(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Ack) {
        acks::bench(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::Storage) {
        report
            .storage
            .extend(storage::bench(&server, &mut conn).await);
    }
    if scenario.includes(Scenario::ChatList) {
        chat_list::bench(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::PollReads) {
        poll_reads::bench(&server, &mut conn, &mut report).await;
    }
    if scenario.includes(Scenario::MessageKinds) {
        message_kinds::bench(&server, &mut conn, &mut report).await;
    }
    drop(conn);
    server.stop().await;
    if scenario.includes(Scenario::Push) {
        // A server of its own: push on, beside a receiver.
        push::bench(setup, &mut report).await;
        // A server of its own: the binary as a child process, whose memory is its own.
        push_outage::bench(setup, &mut report).await;
    }
    if scenario.includes(Scenario::GroupCommit) {
        // Servers of its own: one per write-batch setting.
        group_commit::bench(setup, &mut report).await;
    }
    if scenario.includes(Scenario::AckPaths) {
        // Servers of their own: one per ack path.
        acks::bench_paths(setup, &mut report).await;
    }
    Ok(report)
}
