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
pub mod cursor_counts;
pub mod cursors;
pub mod devices;
pub mod engine;
pub mod entry_refs;
pub mod group_lifecycle;
pub mod groups;
pub mod member_events;
pub mod members;
pub mod message_changes;
pub mod messages;
pub mod models;
mod own_entries;
pub mod push_due;
pub mod push_outbox;
pub mod push_targets;
pub mod receipt_counts;
pub mod receipts;
pub mod shared_acks;
pub mod shared_sends;
pub mod system_lines;
pub mod unread;
pub mod user_groups;

pub use engine::connection::{
    connect_once, AnyConnection, ConnectionManager, DbSettings, Engine, MultiBackend, SqliteSync,
};
pub use engine::error::DbError;
pub use engine::migrations::{
    is_ready, migrate_and_distribute, revert_all_migrations, revert_last_migration, run_migrations,
};
pub use engine::open_failure::describe_open_failure;
pub use engine::pool::{Db, Pool};
