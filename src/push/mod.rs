//! Waking phones that are not polling. A device registers a push target
//! (`db::device::push_targets`); the rule for when it is due a notification is
//! `db::push::push_due`, decided from cursors and never from presence; this job builds each
//! notification in the transaction that records what it tells, stores it as the device's
//! pending one (`db::push::push_outbox`), and hands it to the
//! operator's push service over HTTP, signed, with an idempotency key, retried with backoff.

pub mod build;
pub mod config;
pub mod delivery;
pub mod payload;
pub mod worker;

pub use config::{PushConfig, PushConfigError};
pub use worker::{run, PushJob};
