//! seed: the read-receipt storm of the design notes. One group of 200, 40 members online
//! long-polling, pulling and acking, while the sender sends 200 messages and long-polls its
//! receipts; what it costs in latency, requests, rows and CPU.

mod rows;
mod run;
mod storm;
mod tables;
mod wake;

use std::time::Duration;

use crate::support::engine::Engine;
use crate::POLL_TIMEOUT_S;
use run::run_seed;
use storm::Pacing;

pub const SEED_MEMBERS: usize = 200;
pub const SEED_ONLINE: usize = 40;
pub const SEED_MESSAGES: i64 = 200;
pub const SEED_PACE: Duration = Duration::from_millis(20);
pub const SEED_TIME_LIMIT: Duration = Duration::from_secs(120);
/// Messages already stored, in another group, before the storm: the storm meets tables that
/// hold rows and whose statistics the database has gathered, as on a running service (see
/// `support::scratch_db::analyze`).
pub const SEED_EARLIER_MESSAGES: usize = 500;
/// What a design with a row per recipient writes per message: the message, a row per other
/// member, and an ack flag update per online member (the tables call it "the seeds' design").
pub const NAIVE_ROWS_PER_MESSAGE: usize = 1 + (SEED_MEMBERS - 1) + SEED_ONLINE;

pub async fn bench(engines: &[Engine]) {
    println!("## seed: the read-receipt storm\n");
    println!(
        "One group of {SEED_MEMBERS} members; {SEED_ONLINE} of them online, each long-polling \
         `GET /v1/sync` (timeout_s={POLL_TIMEOUT_S}) and on news pulling \
         `GET /v1/groups/{{g}}/messages?limit=200` (no `after_msg_id`) and acking its last \
         `msg_id`; the sender long-polls `GET /v1/receipts` and sends {SEED_MESSAGES} \
         messages one after another. Before the storm the database already holds \
         {SEED_EARLIER_MESSAGES} messages of another group, and PostgreSQL's statistics are \
         gathered (`ANALYZE`), as autovacuum keeps them on a running service. Server and all \
         {} clients run in this one process on the same cores. \"ack → sender wake\": from \
         an ack's response reaching its member to the sender's first poll answer whose \
         `read_count` for that message counts it (one sample per ack; negative gaps — the \
         sender heard first — count as 0).\n",
        SEED_ONLINE + 1
    );
    let mut results = Vec::new();
    for &engine in engines {
        for pacing in [Pacing::Paced, Pacing::Unpaced] {
            match run_seed(engine, pacing).await {
                Ok(r) => results.push(r),
                Err(skip) => {
                    println!("{} ({}): skipped: {skip}\n", engine.title(), pacing.text());
                    break;
                }
            }
        }
    }
    if results.is_empty() {
        return;
    }
    tables::print_all(&results);
}
