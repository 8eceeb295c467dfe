//! How many database calls are waiting for a connection right now, for `/metrics`: queued
//! calls are tasks, not threads, so nothing else shows a pool that cannot keep up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[derive(Clone, Default)]
pub struct WaitCount(Arc<AtomicUsize>);

/// One waiting call; it stops counting when dropped.
pub struct Waiting(Arc<AtomicUsize>);

impl WaitCount {
    /// Counts a call from now until the returned guard is dropped.
    pub fn enter(&self) -> Waiting {
        self.0.fetch_add(1, Ordering::Relaxed);
        Waiting(self.0.clone())
    }

    pub fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_while_its_guard_lives() {
        let count = WaitCount::default();
        let first = count.enter();
        let second = count.enter();
        assert_eq!(count.now(), 2);
        drop(first);
        assert_eq!(count.now(), 1);
        drop(second);
        assert_eq!(count.now(), 0);
    }
}
