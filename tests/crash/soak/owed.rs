//! Did every long-poller hear of every change it was owed?
//!
//! `/v1/sync`: a poller holds a chain of cursors c0, c1, ... (c(j+1) came with the answer to
//! the poll with cj). A change whose request *started* after cj *arrived* committed after cj
//! was taken, so openapi.yaml owes it to the answer of cj or of a later cursor ("any change
//! committed after the cursor was taken is reported by the next poll"; a poll retried with the
//! same cursor after a lost answer may repeat, never skip). So, with j the last cursor that
//! arrived before the change's first attempt started:
//! - a message from someone else, acknowledged with msg_id k, in a group the poller's user
//!   was surely a member of from that start to its 2xx: some answer to cj or later names the
//!   group with `last_msg_id` >= k, or (the churn group only) in `removed_group_ids`, since a
//!   user removed before the poll answers learns of the removal instead;
//! - a membership change of the poller's user that took effect: some answer to cj or later
//!   names the group (in `groups` or in `removed_group_ids`: a later change may supersede it).
//!
//! Changes whose request started before the poller's first cursor arrived are not owed.
//!
//! `/v1/receipts`: after the traffic and a final drain, the last counts reported for each of
//! the poller's messages are its counts now; a message never reported has nobody who read or
//! received it.

use std::collections::HashMap;
use std::time::Instant;

use super::churn::Churn;
use super::receipts_poller::Counts;
use super::sync_poller::{Mention, SyncPoller};
use crate::sigkill::sender_lane::AcknowledgedSend;

#[derive(Default, Debug)]
pub struct Owed {
    pub messages_owed: u64,
    pub messages_not_owed: u64,
    pub membership_owed: u64,
    pub receipts_checked: u64,
    pub receipts_reported: u64,
    pub missed: Vec<String>,
}

impl Owed {
    /// Checks one `/v1/sync` poller against the acknowledged sends and the churn; `static_groups`
    /// are the groups its user belongs to for the whole run.
    pub fn check_sync(
        &mut self,
        poller: &SyncPoller,
        static_groups: &[i64],
        sends: &[&AcknowledgedSend],
        churn: &Churn,
    ) {
        let reach = Reach::of(poller);
        let user = poller.user();
        let windows = churn.member_windows(user);
        for send in sends.iter().filter(|s| s.sender_id != user) {
            let surely_member = if static_groups.contains(&send.group_id) {
                true
            } else if send.group_id == churn.group_id {
                windows.iter().any(|&(from, to)| {
                    from < send.first_sent_at && to.is_none_or(|to| send.acknowledged_at < to)
                })
            } else {
                false
            };
            if !surely_member {
                continue;
            }
            let Some(j) = reach.last_cursor_before(send.first_sent_at) else {
                self.messages_not_owed += 1;
                continue;
            };
            self.messages_owed += 1;
            let removal_counts = send.group_id == churn.group_id;
            if !reach.reported(send.group_id, j, send.msg_id, removal_counts) {
                self.missed.push(format!(
                    "{} was never told of {}/{} ({}) sent after cursor {j}",
                    poller.caller, send.group_id, send.msg_id, send.client_msg_id
                ));
            }
        }
        for change in churn.changes.iter().filter(|c| c.user == user) {
            let Some(j) = reach.last_cursor_before(change.first_sent_at) else {
                continue;
            };
            self.membership_owed += 1;
            if !reach.reported(churn.group_id, j, 0, true) {
                self.missed.push(format!(
                    "{} was never told it was {:?} in group {} after cursor {j}",
                    poller.caller, change.change, churn.group_id
                ));
            }
        }
    }

    /// Checks one `/v1/receipts` poller: `final_counts` are its messages' counts now.
    pub fn check_receipts(
        &mut self,
        caller: &str,
        latest: &HashMap<(i64, i64), Counts>,
        final_counts: &HashMap<(i64, i64), Counts>,
    ) {
        for (&(group_id, msg_id), &now) in final_counts {
            self.receipts_checked += 1;
            match latest.get(&(group_id, msg_id)) {
                Some(&reported) => {
                    self.receipts_reported += 1;
                    if reported != now {
                        self.missed.push(format!(
                            "{caller}: {group_id}/{msg_id} last reported {reported:?}, now {now:?}"
                        ));
                    }
                }
                None if now.0 > 0 || now.2 > 0 => self.missed.push(format!(
                    "{caller}: {group_id}/{msg_id} never reported, now {now:?}"
                )),
                None => {}
            }
        }
    }
}

/// One group's mentions in a poller's answers: the cursor index of each, and the highest
/// `last_msg_id` (and whether a removal) named from that mention on.
struct GroupReach {
    indexes: Vec<usize>,
    best_from: Vec<(i64, bool)>,
}

/// A poller's answers, indexed for "was group g named by an answer to cursor j or later".
struct Reach<'a> {
    cursor_at: &'a [Instant],
    groups: HashMap<i64, GroupReach>,
}

impl<'a> Reach<'a> {
    fn of(poller: &'a SyncPoller) -> Reach<'a> {
        let mut groups = HashMap::new();
        for (&group_id, mentions) in &poller.mentions {
            let indexes: Vec<usize> = mentions.iter().map(|&(j, _)| j).collect();
            let mut best = vec![(0, false); mentions.len()];
            let mut running = (0, false);
            for (i, &(_, mention)) in mentions.iter().enumerate().rev() {
                match mention {
                    Mention::Changed { last_msg_id } => running.0 = running.0.max(last_msg_id),
                    Mention::Removed => running.1 = true,
                }
                best[i] = running;
            }
            let reach = GroupReach {
                indexes,
                best_from: best,
            };
            groups.insert(group_id, reach);
        }
        Reach {
            cursor_at: &poller.cursor_at,
            groups,
        }
    }

    /// The last cursor that arrived before `at`.
    fn last_cursor_before(&self, at: Instant) -> Option<usize> {
        self.cursor_at.partition_point(|&t| t < at).checked_sub(1)
    }

    /// Whether an answer to cursor j or later named `group_id` with `last_msg_id` >= `msg_id`
    /// (or as removed, when `removal_counts`).
    fn reported(&self, group_id: i64, j: usize, msg_id: i64, removal_counts: bool) -> bool {
        let Some(group) = self.groups.get(&group_id) else {
            return false;
        };
        let from = group.indexes.partition_point(|&i| i < j);
        group
            .best_from
            .get(from)
            .is_some_and(|&(last, removed)| last >= msg_id || (removal_counts && removed))
    }
}
