//! A user's devices: their delivered cursors per group, and their push targets.

pub mod devices;
pub mod push_targets;
