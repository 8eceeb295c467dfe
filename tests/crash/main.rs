//! Crash-safety tests on the real `chorus` binary, run as a subprocess.
//!
//! - `sigkill::sigkill_during_traffic_loses_and_duplicates_nothing`: SIGKILL the server again
//!   and again while senders and members are mid-request, restart it, and check that no
//!   acknowledged send was lost or stored twice, that message ids stay contiguous, that no
//!   cursor moved backwards, and that every send whose response was lost ends up stored exactly
//!   once after a retry.
//! - `changes::sigkill_during_recalls_edits_and_deletes_leaves_nothing_half_applied`: SIGKILL
//!   the server 10 times while two members send messages and recall, edit and delete them;
//!   after the restarts every change answered 2xx is applied (recalled and deleted messages
//!   have no content, edited ones their latest text), every change entry is in the log once
//!   under contiguous ids, and no change entry lacks its effect nor any effect its entry.
//! - `contention::sqlite_concurrent_writers_never_see_database_locked`: 32 concurrent writers
//!   on SQLite only ever get 2xx, and the server never logs "database is locked"; the
//!   `_with_outside_writer` variant adds a second process holding a write transaction on the
//!   same file for 1 s.
//!
//! - `push_restart::due_and_in_flight_notifications_survive_sigkill`: SIGKILL the server while
//!   a device is due a notification, and again while one is being delivered; after each
//!   restart the notification goes out (the second with the key of the killed attempt).
//! - `push_takeover::a_live_instance_takes_over_the_push_work_of_one_killed_holding_it`
//!   (PostgreSQL only): two instances on one database; the one delivering notifications to a
//!   hanging push service is SIGKILLed, and the other delivers them once their lease runs out,
//!   with the key and bytes of the killed attempts, and the notifications due meanwhile too.
//!
//! - `soak::soak_across_instances_keeps_every_promise`: three instances on one PostgreSQL
//!   database (one on SQLite) behind a round-robin client, under sends, pulls, acks from
//!   several devices, long-polls on both feeds and membership churn, while an instance is
//!   SIGKILLed and restarted every eighth of the run and PostgreSQL (a private cluster) is
//!   restarted once; checks exactly-once storage, contiguous ids, cursors, that every poller
//!   heard of every change it was owed, request bounds, and that memory stayed flat.
//!
//! Settings: `CHORUS_TEST_DATABASE_URL` (PostgreSQL admin URL; the PostgreSQL variants are
//! ignored unless it was set at build time), `CHORUS_CRASH_KILLS` (kills per engine, at least
//! 10), `CHORUS_CRASH_SEED` (replays the timings of an earlier run, the soak's too),
//! `CHORUS_SOAK_SECS` (how long the soak's traffic runs per engine: 60 s by default, at least
//! 20; RELIABILITY.md has a 1,800 s run), `CHORUS_RELIABILITY_LOG` (a file each crash and soak
//! run appends its summary to, as one JSON line). The soak on PostgreSQL needs root and
//! Debian's PostgreSQL binaries for its private cluster, like tests/outage.

#[path = "../support/mod.rs"]
mod support;

mod changes;
mod contention;
mod push_restart;
mod push_rig;
mod push_takeover;
mod server;
mod sigkill;
mod soak;

/// The tests of this binary each run a server and many clients on a 2-core machine: one at a
/// time, so their timings do not disturb each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
