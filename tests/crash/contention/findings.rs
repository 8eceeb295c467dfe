//! What a contention run found: statuses, failures, the slowest request, requests that
//! overlapped an outside hold, "database is locked" in the log, and whether every created
//! message is stored once with contiguous ids.

use std::collections::BTreeMap;
use std::time::Duration;

use super::outside_writer::Hold;
use super::{Outcome, WRITERS, WRITER_REQUESTS};
use crate::support::client::ApiClient;

pub struct Findings {
    pub statuses: BTreeMap<String, usize>,
    /// Every request not answered 2xx, described.
    pub failures: Vec<String>,
    pub slowest: Duration,
    /// Requests in flight during an outside hold (None without the outside writer).
    pub overlapping: Option<usize>,
    pub locked_lines: Vec<String>,
}

impl Findings {
    pub fn of(outcomes: &[Outcome], holds: Option<&[Hold]>, log: &str) -> Findings {
        let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
        for o in outcomes {
            let status = o.status.map_or("lost".to_owned(), |s| s.to_string());
            *statuses.entry(format!("{} {status}", o.kind)).or_default() += 1;
        }
        let failures = outcomes
            .iter()
            .filter(|o| !o.status.is_some_and(|s| (200..300).contains(&s)))
            .map(|o| {
                format!(
                    "{} at {:?} -> {:?} after {:?}: {}",
                    o.kind,
                    o.started,
                    o.status,
                    o.ended - o.started,
                    o.body
                )
            })
            .collect();
        let slowest = outcomes
            .iter()
            .map(|o| o.ended - o.started)
            .max()
            .unwrap_or_default();
        let overlapping = holds.map(|holds| {
            outcomes
                .iter()
                .filter(|o| holds.iter().any(|&(b, e)| o.started < e && o.ended > b))
                .count()
        });
        let locked_lines = log
            .lines()
            .filter(|l| l.contains("database is locked"))
            .map(str::to_owned)
            .collect();
        Findings {
            statuses,
            failures,
            slowest,
            overlapping,
            locked_lines,
        }
    }

    pub fn print(&self, outcomes: usize, holds: Option<&[Hold]>, elapsed: Duration) {
        println!(
            "sqlite writers={WRITERS} requests={outcomes} outside_writer={} holds={holds:?} \
             overlapping_holds={:?} elapsed={elapsed:?} slowest={:?} statuses={:?} non_2xx={} \
             locked_log_lines={}",
            holds.is_some(),
            self.overlapping,
            self.slowest,
            self.statuses,
            self.failures.len(),
            self.locked_lines.len(),
        );
    }

    pub fn assert_all_2xx_and_never_locked(&self, outcomes: usize, probes: usize) {
        assert_eq!(outcomes, WRITER_REQUESTS + probes);
        if let Some(overlapping) = self.overlapping {
            assert!(
                overlapping > 0,
                "no request overlapped the outside write transaction: the variant tested nothing"
            );
        }
        let locked = &self.locked_lines;
        assert!(
            self.failures.is_empty(),
            "{} of {outcomes} requests were not 2xx ({:?}); first ones:\n{}\nlog lines with \
             \"database is locked\": {}\n{}",
            self.failures.len(),
            self.statuses,
            self.failures[..self.failures.len().min(5)].join("\n"),
            locked.len(),
            locked[..locked.len().min(3)].join("\n"),
        );
        assert!(
            locked.is_empty(),
            "the server logged \"database is locked\" {} times:\n{}",
            locked.len(),
            locked[..locked.len().min(3)].join("\n")
        );
    }
}

/// Every 201 stored once, ids contiguous: one line per group where that is not so.
pub async fn stored_id_problems(
    api: &ApiClient,
    reader: &str,
    groups: &[i64],
    outcomes: &[Outcome],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (slot, &group_id) in groups.iter().enumerate() {
        let (messages, last_msg_id) = api.pull_all(reader, group_id).await;
        let created = outcomes
            .iter()
            .filter(|o| o.kind.ends_with("send") && o.status == Some(201))
            .filter(|o| o.body["group_id"].as_i64() == Some(group_id))
            .count();
        let ids: Vec<i64> = messages.iter().map(|m| m.msg_id).collect();
        if ids != (1..=last_msg_id).collect::<Vec<i64>>() || ids.len() != created {
            problems.push(format!(
                "group {slot}: {} stored, {created} created, last_msg_id {last_msg_id}",
                ids.len()
            ));
        }
    }
    problems
}
