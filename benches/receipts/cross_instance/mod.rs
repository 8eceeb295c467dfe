//! cross-instance: an ack on one instance wakes the sender's receipt poll on another (two
//! in-process servers on one PostgreSQL database, woken through LISTEN/NOTIFY), against the
//! same loop on one instance.

mod run;

use std::collections::HashMap;
use std::time::Duration;

use crate::measure::{f2, summarize};
use crate::support::engine::Engine;

// cross-instance
pub const X_MEMBERS: usize = 20;
pub const X_GROUPS: usize = 2;
pub const X_MESSAGES: i64 = 5;
/// After a wake-up is seen, let the sender's next poll park before the next ack, so each
/// sample measures a wake-up rather than a poll that finds the change on arrival.
pub const X_SETTLE: Duration = Duration::from_millis(5);
pub const X_WAIT: Duration = Duration::from_secs(5);
pub const X_TIME_LIMIT: Duration = Duration::from_secs(60);
pub const X_IMMEDIATE_POLLS: usize = 100;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Topology {
    OneInstance,
    TwoInstances,
}

pub struct WakeResult {
    pub engine: Engine,
    pub topology: Topology,
    pub ack_http: Vec<f64>,
    /// `GET /v1/receipts` with changes already there: the read a woken poll makes.
    pub immediate: Vec<f64>,
    pub wake: Vec<f64>,
    pub missed: usize,
    pub errors: String,
}

/// (group, msg) -> read_count, one answer of the sender's poll.
pub type Changes = Vec<((i64, i64), i64)>;

pub async fn bench(engines: &[Engine]) {
    println!("## cross-instance: an ack on one instance wakes the sender's poll on another\n");
    let acks = X_GROUPS * X_MESSAGES as usize * X_MEMBERS;
    println!(
        "{X_GROUPS} groups of a sender and {X_MEMBERS} members; the sender sent {X_MESSAGES} \
         messages to each. The sender long-polls `GET /v1/receipts` on instance A; the members \
         ack one message at a time, one after another ({acks} acks, each moving a cursor), on \
         instance B — a second `Application` in this process on the same PostgreSQL database, \
         woken through LISTEN/NOTIFY. Each ack waits until the sender's poll answered with it, \
         then {} ms more so the next poll is parked. The latency is from the ack's response \
         reaching the member to the sender's poll answer that counts it (negative gaps count \
         as 0). The same loop with one instance (acks on A too) is the in-process baseline.\n",
        X_SETTLE.as_millis()
    );
    let mut runs = Vec::new();
    for &engine in engines {
        runs.push((engine, Topology::OneInstance));
        if engine == Engine::Postgres {
            runs.push((engine, Topology::TwoInstances));
        }
    }
    let mut results = Vec::new();
    for (engine, topology) in runs {
        match run::run_wake_loop(engine, topology).await {
            Ok(r) => results.push(r),
            Err(skip) => println!("{} {topology:?}: skipped: {skip}\n", engine.title()),
        }
    }
    if !results.is_empty() {
        print_table(&results);
    }
}

fn print_table(results: &[WakeResult]) {
    println!(
        "| engine | poll on / ack on | acks | ack HTTP p50 ms | ack→wake p50 ms | p99 ms | max ms | mean ms | sender first | missed | immediate poll p50 / p99 ms | errors |"
    );
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|");
    let mut p99s = HashMap::new();
    for r in results {
        let clamped: Vec<f64> = r.wake.iter().map(|w| w.max(0.0)).collect();
        let wake = summarize(&clamped);
        let http = summarize(&r.ack_http);
        let immediate = summarize(&r.immediate);
        let early = r.wake.iter().filter(|w| **w < 0.0).count();
        let topology = match r.topology {
            Topology::OneInstance => "A / A (one instance)",
            Topology::TwoInstances => "A / B (two instances)",
        };
        if let Some(w) = wake {
            p99s.insert((r.engine, r.topology), w.p99);
        }
        println!(
            "| {} | {topology} | {} | {} | {} | {} | {} | {} | {early} | {} | {} / {} | {} |",
            r.engine.title(),
            r.ack_http.len(),
            f2(http.map(|s| s.p50)),
            f2(wake.map(|s| s.p50)),
            f2(wake.map(|s| s.p99)),
            f2(wake.map(|s| s.max)),
            f2(wake.map(|s| s.mean)),
            r.missed,
            f2(immediate.map(|s| s.p50)),
            f2(immediate.map(|s| s.p99)),
            r.errors,
        );
    }
    if let (Some(one), Some(two)) = (
        p99s.get(&(Engine::Postgres, Topology::OneInstance)),
        p99s.get(&(Engine::Postgres, Topology::TwoInstances)),
    ) {
        println!(
            "\nPostgreSQL p99, two instances / one instance: {:.2}×.",
            two / one.max(1e-9)
        );
    }
    println!(
        "\nImmediate poll: {X_IMMEDIATE_POLLS}× `GET /v1/receipts?timeout_s=0` on A from the \
         cursor taken before the acks (all {} messages changed behind it): the database read \
         and HTTP round trip a woken poll makes, without any waiting.",
        X_GROUPS * X_MESSAGES as usize
    );
    println!();
}
