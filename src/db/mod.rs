//! Database access: one connection type over SQLite and PostgreSQL ([`connection`]), the pools
//! ([`pool`]), migrations ([`migrations`]), and one module of queries per table or job.
//!
//! Everything below `db::` is plain diesel: no HTTP types. Handlers reach it only through
//! [`Db::read`] and [`Db::write`], which run the closure on a blocking thread with a pooled
//! connection, so an async worker never waits on the database. A write records the wake-ups
//! it causes; [`Db::write`] publishes the write after the commit (feed positions, wake-ups to
//! other instances and to this process's long-polls), so no caller decides them a second time.

pub mod access;
pub mod changes;
pub mod chat_list;
mod connection;
pub mod cursor_counts;
pub mod cursors;
pub mod devices;
pub mod distribution;
pub mod entry_refs;
mod error;
mod fixed_sql;
mod gated_pool;
pub mod group_lifecycle;
pub mod groups;
pub mod member_events;
pub mod members;
pub mod message_changes;
pub mod messages;
mod migrations;
pub mod models;
mod open_failure;
mod own_entries;
mod pool;
mod proven_connection;
pub mod publish;
pub mod push_due;
pub mod push_outbox;
pub mod push_targets;
pub mod raw_sql;
pub mod receipt_counts;
pub mod receipts;
pub mod shared_acks;
pub mod shared_commits;
pub mod shared_sends;
mod storage;
pub mod system_lines;
pub mod unread;
pub mod user_groups;
mod wait_count;
mod write_lane;

pub use connection::{
    connect_once, AnyConnection, ConnectionManager, DbSettings, Engine, MultiBackend, SqliteSync,
};
pub use error::DbError;
pub use migrations::{
    is_ready, migrate_and_distribute, revert_all_migrations, revert_last_migration, run_migrations,
};
pub use open_failure::describe_open_failure;
pub use pool::{Db, Pool};
