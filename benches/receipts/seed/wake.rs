//! "ack → sender wake": how long after an ack reached its member the sender's receipt poll
//! counted it.

use std::collections::HashMap;
use std::time::Instant;

use super::storm::{AckRecord, ReceiptAnswer};
use crate::measure::signed_ms;

/// "ack → sender wake": for each ack, the time from its response reaching the member to the
/// first answer of the sender's poll whose read_count for the ack's last message counts it.
/// The k-th ack (by response time) covering message m is counted by the first answer showing
/// read_count(m) >= k. Returns the samples (negative when the sender heard first), and how
/// many acks were never reflected.
pub fn ack_to_wake(acks: &[AckRecord], answers: &[ReceiptAnswer]) -> (Vec<f64>, usize) {
    let mut order: Vec<&AckRecord> = acks.iter().collect();
    order.sort_by_key(|a| a.at);
    // msg -> how many acks (in response order) covered it so far.
    let mut covered: HashMap<i64, i64> = HashMap::new();
    let mut wanted: Vec<(i64, i64, Instant)> = Vec::new();
    for ack in &order {
        for msg in ack.from + 1..=ack.to {
            let k = covered.entry(msg).or_default();
            *k += 1;
            if msg == ack.to {
                wanted.push((msg, *k, ack.at));
            }
        }
    }
    // msg -> answers mentioning it, in arrival order: (at, read_count).
    let mut seen: HashMap<i64, Vec<(Instant, i64)>> = HashMap::new();
    for answer in answers {
        for (msg, read) in &answer.changes {
            seen.entry(*msg).or_default().push((answer.at, *read));
        }
    }
    let mut samples = Vec::new();
    let mut missed = 0;
    for (msg, k, acked_at) in wanted {
        let hit = seen
            .get(&msg)
            .and_then(|list| list.iter().find(|(_, read)| *read >= k));
        match hit {
            Some((at, _)) => samples.push(signed_ms(acked_at, *at)),
            None => missed += 1,
        }
    }
    (samples, missed)
}
