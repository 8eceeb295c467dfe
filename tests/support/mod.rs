//! The one harness of the tests and benches: databases, servers (in this process or as a child
//! process), HTTP clients that mint their own tokens, free ports and the machine's facts.
//!
//! Test and bench targets are separate crates, so each includes this directory as a module
//! of its own: `#[path = "../support/mod.rs"] mod support;` in tests/<target>/main.rs,
//! `#[path = "../../tests/support/mod.rs"] mod support;` in benches/<target>/main.rs.

// Every target uses a different part of the harness; the rest would warn as unused in each.
#![allow(dead_code)]

pub mod child_server;
pub mod client;
pub mod engine;
pub mod histogram;
pub mod http;
pub mod machine;
pub mod ports;
pub mod private_citus;
pub mod private_cluster;
pub mod proc_status;
pub mod push_receiver;
pub mod request_log;
pub mod scratch_db;
pub mod scratch_pg;
pub mod server;
pub mod tokens;
