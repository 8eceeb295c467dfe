//! Acks: a member's delivered and read cursors moved forward, one group or many, and acks
//! that share a transaction.

pub mod cursors;
pub mod shared_acks;
