//! A bounded soak across instances: `chorus serve` instances (three on one PostgreSQL
//! database, one on SQLite) behind the test's own round-robin client, under mixed traffic for
//! `CHORUS_SOAK_SECS` (60 s by default), while an instance is SIGKILLed and restarted every
//! eighth of the run (at least 8 s, at most 2 minutes apart) and, on PostgreSQL, the database
//! is stopped and started once halfway.
//!
//! The traffic: senders sending with retries (the same `client_msg_id` after a lost answer
//! or a 503), members pulling page by page and acking, two of them from two devices each,
//! `/v1/sync` pollers of two members and of a churned user, `/v1/receipts` pollers of every
//! sender (both long-polls with cursors), and membership churn in one group (the owner adds
//! and removes two users, who also leave by themselves).
//!
//! Checked at the end, with counts: every send answered 2xx is stored once with its msg_id;
//! every group's ids are 1..last; no cursor moved backwards; every poller heard of every
//! change it was owed (defined in [`owed`]); every membership change wrote one system line;
//! no request took longer than its documented bound ([`ORDINARY_SLACK`], [`POLL_SLACK`]);
//! each instance's memory and sockets, sampled from /proc, stayed flat ([`GROWTH_FACTOR`], for
//! processes that lived [`GROWTH_MIN_LIFE_SECS`]; sockets are reported, not bounded).

mod churn;
mod faults;
mod feed_poll;
mod fleet;
mod owed;
mod receipts_poller;
mod report;
mod run;
mod sampler;
mod sync_poller;

use std::time::Duration;

const SECS_VAR: &str = "CHORUS_SOAK_SECS";
const DEFAULT_SECS: u64 = 60;
/// Added to the pool timeout for the bound of an ordinary request: a debug build on a loaded
/// two-core machine, with fsync on every SQLite commit.
pub const ORDINARY_SLACK: Duration = Duration::from_secs(5);
/// Added to a long-poll's `timeout_s`.
pub const POLL_SLACK: Duration = Duration::from_secs(5);
/// The median RSS of the last third of a process's samples may be at most this many times
/// the median of its first third (which includes its warm-up, hence the generous factor)...
pub const GROWTH_FACTOR: f64 = 2.0;
/// ...checked only for a process that lived this long: a younger one is still warming up,
/// and its figures are reported only.
pub const GROWTH_MIN_LIFE_SECS: f64 = 30.0;

mod soak_across_instances_keeps_every_promise {
    use crate::support::engine::Engine;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::run::soak(Engine::Sqlite).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    #[cfg_attr(
        not(chorus_pg_tests),
        ignore = "set CHORUS_TEST_DATABASE_URL to run on PostgreSQL"
    )]
    async fn postgres() {
        super::run::soak(Engine::Postgres).await
    }
}

/// CHORUS_SOAK_SECS: how long the traffic runs (at least 20 s, so a kill happens).
fn soak_secs() -> u64 {
    std::env::var(SECS_VAR)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(DEFAULT_SECS)
        .max(20)
}
