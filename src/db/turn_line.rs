//! A line of blocking threads served strictly in arrival order, each allowed to give up at a
//! deadline.
//!
//! A mutex does not keep order: a thread that arrives while the lock is free takes it, even
//! if another has been waiting (parking_lot's fair mutex too, for a waiter still spinning
//! before it parks). Here each thread takes a ticket, and the tickets are served in order.

use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

#[derive(Default)]
pub struct TurnLine {
    state: Mutex<LineState>,
    changed: Condvar,
}

#[derive(Default)]
struct LineState {
    next_ticket: u64,
    serving: u64,
    /// Tickets whose holders gave up before their turn: skipped when it comes.
    gone: BTreeSet<u64>,
}

/// The head of the line; the next ticket's turn comes when it is dropped.
pub struct Turn<'a> {
    line: &'a TurnLine,
}

impl TurnLine {
    /// Waits for this thread's turn, or None if `deadline` passes first (its place is given
    /// up, and the line moves past it).
    pub fn wait_turn(&self, deadline: Instant) -> Option<Turn<'_>> {
        let mut state = self.lock();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        loop {
            if state.serving == ticket {
                return Some(Turn { line: self });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                state.gone.insert(ticket);
                return None;
            }
            state = match self.changed.wait_timeout(state, left) {
                Ok((state, _)) => state,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// The state; a thread that panicked holding it left it consistent (every change is one
    /// assignment or one set operation), so a poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, LineState> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut state = self.line.lock();
        loop {
            state.serving += 1;
            let next = state.serving;
            if !state.gone.remove(&next) {
                break;
            }
        }
        drop(state);
        // A handful of waiters at most (the permits past the pool's size): waking all and
        // letting the one whose turn it is go on is simpler than a condition per ticket.
        self.line.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    #[test]
    fn threads_are_served_in_the_order_they_lined_up() {
        let line = Arc::new(TurnLine::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let head = line.wait_turn(far()).expect("an empty line");
        let threads: Vec<_> = (0..8)
            .map(|n: usize| {
                let (waiting, order) = (line.clone(), order.clone());
                let thread = std::thread::spawn(move || {
                    let _turn = waiting.wait_turn(far()).expect("a turn");
                    order.lock().expect("order").push(n);
                });
                // Lined up before the next one starts.
                wait_for_tickets(&line, n as u64 + 2);
                thread
            })
            .collect();
        drop(head);
        for thread in threads {
            thread.join().expect("thread");
        }
        assert_eq!(
            *order.lock().expect("order"),
            (0..8).collect::<Vec<usize>>()
        );
    }

    #[test]
    fn one_that_gives_up_is_skipped_and_the_line_goes_on() {
        let line = Arc::new(TurnLine::default());
        let head = line.wait_turn(far()).expect("an empty line");
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(line.wait_turn(soon).is_none(), "gave up behind the head");
        let behind = {
            let line = line.clone();
            std::thread::spawn(move || line.wait_turn(far()).is_some())
        };
        wait_for_tickets(&line, 3);
        drop(head);
        assert!(
            behind.join().expect("thread"),
            "served after the one that left"
        );
        assert!(
            line.wait_turn(Instant::now()).is_some(),
            "the line is free again"
        );
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(30)
    }

    fn wait_for_tickets(line: &TurnLine, tickets: u64) {
        while line.lock().next_ticket < tickets {
            std::thread::yield_now();
        }
    }
}
