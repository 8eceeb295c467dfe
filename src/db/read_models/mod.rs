//! Reads over several aggregates: the change feeds behind long-polls, the chat list, and
//! read receipts of messages.

pub mod changes;
pub mod chat_list;
pub mod receipt_counts;
