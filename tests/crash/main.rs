//! Crash-safety tests on the real `chorus` binary, run as a subprocess.
//!
//! - `sigkill::sigkill_during_traffic_loses_and_duplicates_nothing`: SIGKILL the server again
//!   and again while senders and members are mid-request, restart it, and check that no
//!   acknowledged send was lost or stored twice, that message ids stay contiguous, that no
//!   cursor moved backwards, and that every send whose response was lost ends up stored exactly
//!   once after a retry.
//! - `contention::sqlite_concurrent_writers_never_see_database_locked`: 32 concurrent writers
//!   on SQLite only ever get 2xx, and the server never logs "database is locked"; the
//!   `_with_outside_writer` variant adds a second process holding a write transaction on the
//!   same file for 1 s.
//!
//! - `push_restart::due_and_in_flight_notifications_survive_sigkill`: SIGKILL the server while
//!   a device is due a notification, and again while one is being delivered; after each
//!   restart the notification goes out (the second with the key of the killed attempt).
//!
//! Settings: `CHORUS_TEST_DATABASE_URL` (PostgreSQL admin URL; the PostgreSQL variant is ignored
//! unless it was set at build time), `CHORUS_CRASH_KILLS` (kills per engine, at least 10),
//! `CHORUS_CRASH_SEED` (replays the timings of an earlier run), `CHORUS_RELIABILITY_LOG` (a file
//! each crash run appends its summary to, as one JSON line).

#[path = "../support/mod.rs"]
mod support;

mod contention;
mod push_restart;
mod server;
mod sigkill;
mod soak;

/// The tests of this binary each run a server and many clients on a 2-core machine: one at a
/// time, so their timings do not disturb each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
