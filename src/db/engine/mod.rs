//! The engine layer: connections to SQLite or PostgreSQL (and Citus), the pools, SQLite's
//! writer lane, writes that share a commit, publication after each commit (feed positions and
//! wake-ups), migrations, distribution on Citus, and the SQL builders. It knows no table's
//! rules: the modules beside it state those and run on it.

pub(super) mod connection;
pub mod distribution;
pub(super) mod error;
pub(super) mod fixed_sql;
pub(super) mod gated_pool;
pub(super) mod migrations;
pub(super) mod open_failure;
pub(super) mod pool;
pub(super) mod proven_connection;
pub mod publish;
pub mod raw_sql;
pub mod row_locks;
pub mod shared_commits;
mod sql_types;
pub(super) mod storage;
pub(super) mod wait_count;
pub(super) mod write_lane;
