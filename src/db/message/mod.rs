//! A group's log of entries: the idempotent send, the pages of a pull, recall, edit and
//! delete, what entries point at, and sends that share a transaction.

pub mod entry_refs;
pub mod message_changes;
pub mod messages;
pub mod shared_sends;
