//! Database access, in layers: [`engine`] (connections to SQLite or PostgreSQL, pools, the
//! writer lane, publication, migrations) at the bottom; one folder per aggregate above it
//! ([`group`], [`message`], [`member_cursors`], [`acks`], [`device`], [`push`]), each stating
//! its rules once; [`read_models`] (feeds, the chat list, receipt counts) reading across them.
//! Row structs shared by all are in [`models`]. Arrows point down only.
//!
//! Everything below `db::` is plain diesel: no HTTP types. Handlers reach it only through
//! [`Db::read`] and [`Db::write`], which run the closure on a blocking thread with a pooled
//! connection, so an async worker never waits on the database. A write records the wake-ups
//! it causes; [`Db::write`] publishes the write after the commit (feed positions, wake-ups to
//! other instances and to this process's long-polls), so no caller decides them a second time.

pub mod acks;
pub mod device;
pub mod engine;
pub mod group;
pub mod member_cursors;
pub mod message;
pub mod models;
pub mod push;
pub mod read_models;

pub use engine::connection::{
    connect_once, AnyConnection, ConnectionManager, DbSettings, Engine, MultiBackend, SqliteSync,
};
pub use engine::error::DbError;
pub use engine::migrations::{
    is_ready, migrate_and_distribute, revert_all_migrations, revert_last_migration, run_migrations,
};
pub use engine::open_failure::describe_open_failure;
pub use engine::pool::{Db, Pool};
