//! Push: the rule for when a device is due a notification, and the outbox of notifications
//! being delivered.

pub mod push_due;
pub mod push_outbox;
