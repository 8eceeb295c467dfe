//! Chorus: group messages over plain HTTP. One stored copy per message, one cursor pair per
//! member, offline pull by pages with application-level acks.

pub mod api;
pub mod auth;
pub mod config;
pub mod cursor_folding;
pub mod db;
pub mod domain;
pub mod feeds;
pub mod logging;
pub mod metrics;
pub mod push;
pub mod redact;
pub mod retention;
pub mod schema;
pub mod startup;
pub mod wake_ups;
