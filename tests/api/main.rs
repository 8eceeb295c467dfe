//! Black-box tests of the HTTP API, in one binary. Every scenario runs on SQLite and, when
//! CHORUS_TEST_DATABASE_URL is set, on PostgreSQL.

#[path = "../support/mod.rs"]
mod support;

mod endpoints;
mod helpers;
mod internal_error_log;
mod spec_check;

mod acks;
mod acks_together;
mod auth;
mod authz;
mod bad_input;
mod chat_list;
mod delivery;
mod devices;
mod dropped_polls;
mod feed_positions;
mod group_commit;
mod groups;
mod large_groups;
mod lifecycle;
mod longpoll;
mod mentions;
mod messages;
mod migrations;
mod offline_pull;
mod operations;
mod param_errors;
mod push;
mod push_delivery;
mod push_rig;
mod receipts;
mod send_guarantees;
mod spec_drift;
mod startup_errors;
mod startup_log;
mod storage_full;
mod strict_bodies;
mod system_lines;
mod unparsable_requests;
mod webclient;
