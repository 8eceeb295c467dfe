//! group-size: send and who-read cost against group size. One client sends to groups of 2,
//! 200 and 2000 members and reads who read each message, the sizes taking turns.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::api::{create_group, send_message, CountingHttp};
use crate::measure::{f2, summarize, timed_block, Block, Errors, Summary};
use crate::server::{bench_database, Server};
use crate::support::engine::Engine;
use crate::support::tokens::TokenMint;

const GS_SIZES: [usize; 3] = [2, 200, 2000];
const GS_OPS: usize = 500;
/// Operations per size are run in blocks, interleaving the sizes, so that a slow period of
/// the shared machine does not land on one size only.
const GS_BLOCK: usize = 100;
const GS_WARMUP: usize = 20;
const GS: Block = Block {
    ops: GS_BLOCK,
    time_limit: Duration::from_secs(30),
};
const GS_RECEIPTS_LIMIT: usize = 200;

struct SizeResult {
    size: usize,
    send: Vec<f64>,
    send_secs: f64,
    receipts: Vec<f64>,
    receipts_secs: f64,
}

/// A group of one size: (size, group id, the owner's token).
type SizedGroup = (usize, i64, String);

async fn run_group_size(engine: Engine, errors: &Errors) -> Result<Vec<SizeResult>, String> {
    let db = bench_database(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let server = Server::start(db.url(), &requests).await?;
    let http = server.http.clone();
    let groups = create_groups(&http).await?;
    http.warm_up(1).await;
    let mut results: Vec<SizeResult> = GS_SIZES
        .iter()
        .map(|&size| SizeResult {
            size,
            send: Vec::new(),
            send_secs: 0.0,
            receipts: Vec::new(),
            receipts_secs: 0.0,
        })
        .collect();
    let rounds = GS_OPS / GS_BLOCK;
    for round in 0..rounds {
        for j in 0..GS_SIZES.len() {
            let k = (round + j) % GS_SIZES.len();
            eprintln!(
                "group-size: {} sends, size {}, round {}/{rounds}",
                engine.title(),
                groups[k].0,
                round + 1
            );
            send_block(&http, &groups[k], round, &mut results[k], errors).await;
        }
    }
    for round in 0..rounds {
        for j in 0..GS_SIZES.len() {
            let k = (round + j) % GS_SIZES.len();
            receipts_block(&http, &groups[k], round, &mut results[k], errors).await;
        }
    }
    server.stop().await;
    drop(db);
    Ok(results)
}

/// A group of each size, and [`GS_WARMUP`] sends and who-read reads in each, not measured.
async fn create_groups(http: &CountingHttp) -> Result<Vec<SizedGroup>, String> {
    let mint = TokenMint::new();
    let mut groups = Vec::new();
    for size in GS_SIZES {
        let owner = format!("gs{size}-owner");
        let members: Vec<String> = (0..size - 1).map(|i| format!("gs{size}-m{i:04}")).collect();
        let t = mint.token(&owner);
        let g = create_group(http, &t, &format!("size {size}"), &members).await?;
        for i in 0..GS_WARMUP {
            send_message(http, &t, g, &format!("warm-{i}")).await?;
        }
        let path = format!("/v1/groups/{g}/messages/1/receipts?limit={GS_RECEIPTS_LIMIT}");
        for _ in 0..GS_WARMUP {
            http.get(&path, &t).await?;
        }
        groups.push((size, g, t));
    }
    Ok(groups)
}

/// [`GS_BLOCK`] sends to one group, one after another.
async fn send_block(
    http: &CountingHttp,
    (size, g, t): &SizedGroup,
    round: usize,
    result: &mut SizeResult,
    errors: &Errors,
) {
    let send = |i: usize| {
        let client_msg_id = format!("gs-{round}-{i}");
        async move { send_message(http, t, *g, &client_msg_id).await.map(drop) }
    };
    let what = format!("send, size {size}");
    result.send_secs += timed_block(&what, GS, &mut result.send, errors, send).await;
}

/// [`GS_BLOCK`] who-read reads in one group, over the measured messages in turn.
async fn receipts_block(
    http: &CountingHttp,
    (size, g, t): &SizedGroup,
    round: usize,
    result: &mut SizeResult,
    errors: &Errors,
) {
    let read = |i: usize| {
        let msg = GS_WARMUP + 1 + (round * GS_BLOCK + i) % GS_OPS;
        let path = format!("/v1/groups/{g}/messages/{msg}/receipts?limit={GS_RECEIPTS_LIMIT}");
        async move { http.get(&path, t).await.map(drop) }
    };
    let samples = &mut result.receipts;
    let what = format!("receipts, size {size}");
    result.receipts_secs += timed_block(&what, GS, samples, errors, read).await;
}

pub async fn bench(engines: &[Engine]) {
    println!("## group-size: send and who-read cost against group size\n");
    println!(
        "Groups of {:?} members (created with `POST /v1/groups`, at most 1000 ids per request, \
         the rest with `POST /v1/groups/{{g}}/members`). Per size, one client sends {GS_OPS} \
         messages one after another, then makes {GS_OPS} \
         `GET /v1/groups/{{g}}/messages/{{m}}/receipts?limit={GS_RECEIPTS_LIMIT}` as the sender \
         (over the {GS_OPS} messages it sent). The sizes take turns in blocks of {GS_BLOCK} \
         so that a slow moment of the shared machine does not fall on one size only; \
         {GS_WARMUP} sends and reads per size before measuring are not counted. Server and \
         client in one process.\n",
        GS_SIZES
    );
    for &engine in engines {
        let errors = Errors::default();
        match run_group_size(engine, &errors).await {
            Ok(results) => print_table(engine, &results, &errors),
            Err(skip) => println!("{}: skipped: {skip}\n", engine.title()),
        }
    }
}

fn print_table(engine: Engine, results: &[SizeResult], errors: &Errors) {
    println!("### {}\n", engine.title());
    println!(
        "| members | sends | send p50 ms | send mean ms | send p99 ms | sends/s | who-read reads | who-read p50 ms | who-read mean ms | who-read p99 ms |"
    );
    println!("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    let mut summaries: Vec<(Option<Summary>, Option<Summary>)> = Vec::new();
    for r in results {
        let send = summarize(&r.send);
        let reads = summarize(&r.receipts);
        println!(
            "| {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} |",
            r.size,
            r.send.len(),
            f2(send.map(|s| s.p50)),
            f2(send.map(|s| s.mean)),
            f2(send.map(|s| s.p99)),
            r.send.len() as f64 / r.send_secs.max(1e-9),
            r.receipts.len(),
            f2(reads.map(|s| s.p50)),
            f2(reads.map(|s| s.mean)),
            f2(reads.map(|s| s.p99)),
        );
        summaries.push((send, reads));
    }
    let (small, large) = (&summaries[0], &summaries[summaries.len() - 1]);
    println!(
        "| **ratio {}/{}** | | {} | {} | | | | {} | {} | |",
        GS_SIZES[GS_SIZES.len() - 1],
        GS_SIZES[0],
        ratio(large.0.map(|s| s.p50), small.0.map(|s| s.p50)),
        ratio(large.0.map(|s| s.mean), small.0.map(|s| s.mean)),
        ratio(large.1.map(|s| s.p50), small.1.map(|s| s.p50)),
        ratio(large.1.map(|s| s.mean), small.1.map(|s| s.mean)),
    );
    println!("\nErrors: {}.\n", errors.text());
}

/// Large over small, as "1.23×".
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    }
}
