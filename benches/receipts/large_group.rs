//! large-group: who-read, `with_receipts`, sends and acks in a group of 100,000 members
//! against the same operations in a group of 2, in one run.
//!
//! The 100,000 members join through the API, 1,000 per request. Their cursors are then set
//! straight in the database in four bands, so the measured messages sit where receipt
//! counting is cheap and where it is dearest: an old message that 90% of the group has read,
//! one that exactly half has read (the most index entries either side of it can hold), and a
//! recent one that 10% has read. Everything measured goes through HTTP.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus::db::AnyConnection;
use diesel::RunQueryDsl;

use crate::api::{create_group, send_message, CountingHttp};
use crate::measure::{f2, summarize, timed_block, Block, Errors};
use crate::server::{bench_database, Server};
use crate::support::engine::Engine;
use crate::support::tokens::TokenMint;

const LG_MEMBERS: usize = 100_000;
/// Messages the owner sends after the group is built; the measured ones are among them.
const LG_MESSAGES: usize = 300;
const LG_OPS: usize = 200;
/// Operations run in blocks, the two groups taking turns, so a slow moment of the shared
/// machine falls on both.
const LG_BLOCK: usize = 50;
const LG_WARMUP: usize = 10;
const LG: Block = Block {
    ops: LG_BLOCK,
    time_limit: Duration::from_secs(60),
};
/// A page of the receipt lists and of `with_receipts` messages.
const LG_PAGE: usize = 50;

/// One group and the ids of its measured messages.
struct Built {
    members: usize,
    group: i64,
    owner: String,
    /// The first message the owner sent, read by 90% of the group.
    old: i64,
    /// Read by exactly half of the group.
    half: i64,
    /// Read by 10% of the group.
    recent: i64,
    last: i64,
    /// Members who have read nothing, in order: each measured ack is by the next of them.
    readers_to_be: Vec<String>,
}

/// The measured operations, in table order.
const OPS: [&str; 8] = [
    "who-read, old message (90% read)",
    "who-read, message half the group read",
    "who-read, recent message (10% read)",
    "with_receipts, newest 50 messages",
    "with_receipts, 50 messages around where 40% stopped",
    "send",
    "ack (a member's first read, or the next message)",
    "group info (`GET /v1/groups/{g}`)",
];

async fn run_large_group(
    engine: Engine,
    errors: &Errors,
) -> Result<(Vec<[Vec<f64>; 2]>, f64), String> {
    let db = bench_database(engine)?;
    let requests = Arc::new(AtomicU64::new(0));
    let server = Server::start(db.url(), &requests).await?;
    let http = server.http.clone();
    let mint = TokenMint::new();
    http.warm_up(1).await;
    let started = Instant::now();
    let large = build(&http, &mint, "lg", LG_MEMBERS).await?;
    let build_secs = started.elapsed().as_secs_f64();
    let small = build(&http, &mint, "sm", 2).await?;
    let mut conn = server.direct_connection();
    for built in [&large, &small] {
        set_cursors(&mut conn, built).map_err(|e| format!("set cursors: {e}"))?;
    }
    settle(&mut conn, engine)
        .await
        .map_err(|e| format!("analyze: {e}"))?;
    let groups = [large, small];
    let mut samples: Vec<[Vec<f64>; 2]> = OPS.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for (op, per_group) in samples.iter_mut().enumerate() {
        for round in 0..(LG_OPS / LG_BLOCK) {
            for (k, built) in groups.iter().enumerate() {
                eprintln!(
                    "large-group: {}, {} members, {}, round {}",
                    engine.title(),
                    built.members,
                    OPS[op],
                    round + 1
                );
                let token = mint.token(&built.owner);
                let ctx = Op {
                    http: &http,
                    mint: &mint,
                    built,
                    token: &token,
                };
                if round == 0 {
                    for seq in 0..LG_WARMUP {
                        let _ = ctx.run(op, seq).await;
                    }
                }
                let block = |i: usize| ctx.run(op, LG_WARMUP + round * LG_BLOCK + i);
                timed_block(OPS[op], LG, &mut per_group[k], errors, block).await;
            }
        }
    }
    server.stop().await;
    drop(db);
    Ok((samples, build_secs))
}

/// A group of `members` (the owner included), then [`LG_MESSAGES`] messages from its owner.
async fn build(
    http: &CountingHttp,
    mint: &TokenMint,
    prefix: &str,
    members: usize,
) -> Result<Built, String> {
    let owner = format!("{prefix}-owner");
    let others: Vec<String> = (0..members - 1).map(|i| member(prefix, i)).collect();
    let token = mint.token(&owner);
    let group = create_group(http, &token, &format!("{members} members"), &others).await?;
    let mut sent = Vec::with_capacity(LG_MESSAGES);
    for i in 0..LG_MESSAGES {
        sent.push(send_message(http, &token, group, &format!("{prefix}-build-{i}")).await?);
    }
    let last = sent[sent.len() - 1];
    // The last tenth of the members have read nothing: the measured acks are theirs.
    let quiet_from = band(members - 1, 9);
    Ok(Built {
        members,
        group,
        owner,
        old: sent[0],
        half: sent[LG_MESSAGES / 2],
        recent: last - 5,
        last,
        readers_to_be: (quiet_from..members - 1)
            .map(|i| member(prefix, i))
            .collect(),
    })
}

fn member(prefix: &str, i: usize) -> String {
    format!("{prefix}-m{i:06}")
}

/// Where the `tenth`-th tenth of `n` members starts.
fn band(n: usize, tenth: usize) -> usize {
    n * tenth / 10
}

/// The four bands of members by index: the first 10% have read everything, the next 40% up
/// to `half`, the next 40% up to `old`, the last 10% nothing. So `old` is read by 90%,
/// `half` by 50% and `recent` by 10% (the owner, their sender, is not in the audience).
fn set_cursors(conn: &mut AnyConnection, built: &Built) -> diesel::QueryResult<()> {
    let n = built.members - 1;
    let prefix = built.owner.trim_end_matches("-owner");
    let bands = [
        (0, band(n, 1), built.last),
        (band(n, 1), band(n, 5), built.half),
        (band(n, 5), band(n, 9), built.old),
    ];
    for (from, to, through) in bands {
        if from == to {
            continue;
        }
        diesel::sql_query(format!(
            "UPDATE group_members SET last_ack_msg_id = {through}, last_read_msg_id = {through}, \
             delivered_msg_id = {through} WHERE group_id = {} AND user_id >= '{}' \
             AND user_id < '{}'",
            built.group,
            member(prefix, from),
            member(prefix, to)
        ))
        .execute(conn)?;
    }
    Ok(())
}

/// Statistics and, on PostgreSQL, the visibility map as a running server's autovacuum would
/// have them after a bulk change, so plans are those of production. On PostgreSQL the cursor
/// moves of the bulk change are first left to the server's folding job, and the dead rows
/// folding leaves in `cursor_moves` vacuumed, as autovacuum would soon after such a burst.
async fn settle(conn: &mut AnyConnection, engine: Engine) -> diesel::QueryResult<()> {
    let statements: &[&str] = match engine {
        Engine::Postgres => {
            for _ in 0..600 {
                let waiting =
                    diesel::sql_query("SELECT 1 FROM cursor_moves LIMIT 1").execute(conn)?;
                if waiting == 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            &[
                "VACUUM ANALYZE group_members",
                "VACUUM ANALYZE cursor_moves",
                "VACUUM ANALYZE cursor_counts",
            ]
        }
        Engine::Sqlite => &["ANALYZE"],
    };
    for statement in statements {
        diesel::sql_query(*statement).execute(conn)?;
    }
    Ok(())
}

/// One measured operation in one group.
struct Op<'a> {
    http: &'a CountingHttp,
    mint: &'a TokenMint,
    built: &'a Built,
    token: &'a str,
}

impl Op<'_> {
    /// Operation `op`, the `seq`-th time in this group: sends and acks never repeat one
    /// (an ack that moves no cursor writes nothing, and would flatter the small group).
    async fn run(&self, op: usize, seq: usize) -> Result<(), String> {
        let (g, http, token) = (self.built.group, self.http, self.token);
        let receipts = |m: i64| format!("/v1/groups/{g}/messages/{m}/receipts?limit={LG_PAGE}");
        let page_to = |m: i64| {
            format!(
                "/v1/groups/{g}/messages?before_msg_id={}&limit={LG_PAGE}&with_receipts=true",
                m + 1
            )
        };
        match op {
            0 => http.get(&receipts(self.built.old), token).await.map(drop),
            1 => http.get(&receipts(self.built.half), token).await.map(drop),
            2 => http
                .get(&receipts(self.built.recent), token)
                .await
                .map(drop),
            3 => http.get(&page_to(self.built.last), token).await.map(drop),
            4 => {
                let around = self.built.half + (LG_PAGE as i64) / 2;
                http.get(&page_to(around), token).await.map(drop)
            }
            5 => {
                let id = format!("measured-{seq}");
                send_message(http, token, g, &id).await.map(drop)
            }
            6 => {
                // A reader who has read nothing reads up to a later message each time.
                let readers = &self.built.readers_to_be;
                let reader = &readers[seq % readers.len()];
                let through = self.built.old + 1 + seq as i64;
                let body = serde_json::json!({ "last_ack_msg_id": through });
                let path = format!("/v1/groups/{g}/ack");
                let reader_token = self.mint.token(reader);
                http.post(&path, &reader_token, &body, &[200])
                    .await
                    .map(drop)
            }
            _ => http.get(&format!("/v1/groups/{g}"), token).await.map(drop),
        }
    }
}

pub async fn bench(engines: &[Engine]) {
    println!("## large-group: a group of {LG_MEMBERS} members against a group of 2\n");
    println!(
        "Both groups are built through the API (1,000 ids per request), then their owner \
         sends {LG_MESSAGES} messages. The members' cursors are set in the database in four \
         bands: 10% have read everything, 40% up to the middle message, 40% up to the first, \
         10% nothing; then `VACUUM ANALYZE` (PostgreSQL) or `ANALYZE` (SQLite), as a running \
         server would have. Per operation and group, {LG_OPS} requests one after another, the \
         groups taking turns in blocks of {LG_BLOCK}, {LG_WARMUP} unmeasured first. Receipt \
         lists and pages hold {LG_PAGE}. Server and client in one process.\n"
    );
    for &engine in engines {
        let errors = Errors::default();
        match run_large_group(engine, &errors).await {
            Ok((samples, build_secs)) => print_table(engine, &samples, build_secs, &errors),
            Err(skip) => println!("{}: skipped: {skip}\n", engine.title()),
        }
    }
}

fn print_table(engine: Engine, samples: &[[Vec<f64>; 2]], build_secs: f64, errors: &Errors) {
    println!("### {}\n", engine.title());
    println!(
        "Building the {LG_MEMBERS}-member group and its {LG_MESSAGES} messages took \
         {build_secs:.1} s.\n"
    );
    println!(
        "| operation | 2 members p50 / p99 ms | {LG_MEMBERS} members p50 / p99 ms | p50 ratio |"
    );
    println!("|---|--:|--:|--:|");
    for (op, [large, small]) in OPS.iter().zip(samples) {
        let (l, s) = (summarize(large), summarize(small));
        let ratio = match (l, s) {
            (Some(l), Some(s)) if s.p50 > 0.0 => format!("{:.2}×", l.p50 / s.p50),
            _ => "–".into(),
        };
        println!(
            "| {op} | {} / {} | {} / {} | {ratio} |",
            f2(s.map(|s| s.p50)),
            f2(s.map(|s| s.p99)),
            f2(l.map(|s| s.p50)),
            f2(l.map(|s| s.p99)),
        );
    }
    println!("\nErrors: {}.\n", errors.text());
}
