//! What the run's final reads say against what the clients were told: every acknowledged send
//! stored once with its id, ids without gaps, no cursor below one a response had reported.

use std::collections::HashMap;

use super::sender_lane::AcknowledgedSend;
use super::traffic::Traffic;
use crate::support::client::{ApiClient, StoredMessage};

#[derive(Default, Debug)]
pub struct Verdict {
    /// Acknowledged sends missing from the group (or stored with another id).
    pub lost: Vec<String>,
    /// client_msg_ids stored more than once.
    pub duplicated: Vec<String>,
    /// Ids that are not exactly 1..=last_msg_id.
    pub gaps: Vec<String>,
    /// Cursors below what a 2xx response had reported.
    pub backwards: Vec<String>,
    /// Stored messages nobody was told about (a send must end acknowledged after its retries).
    pub unknown: Vec<String>,
    /// Sends still unanswered after the last restart, unexpected statuses, bad bodies.
    pub problems: Vec<String>,
    /// Messages read back from all groups.
    pub stored: usize,
    /// System lines (membership changes) read back, per group.
    pub system_lines: HashMap<i64, usize>,
}

/// Where each client_msg_id was found: (group_id, msg_id).
type StoredAt = HashMap<String, (i64, i64)>;

impl Verdict {
    /// Reads every group and every member's cursors through `api` and judges them.
    pub async fn judge(api: &ApiClient, traffic: &mut Traffic) -> Verdict {
        let mut verdict = Verdict::default();
        for lane in &traffic.lanes {
            verdict.problems.extend(lane.problems.iter().cloned());
            verdict.problems.extend(
                lane.pending
                    .iter()
                    .map(|p| format!("send {} never answered 2xx", p.client_msg_id)),
            );
        }
        let acknowledged: HashMap<&str, &AcknowledgedSend> = traffic
            .lanes
            .iter()
            .flat_map(|l| &l.acknowledged)
            .map(|a| (a.client_msg_id.as_str(), a))
            .collect();
        let mut stored = StoredAt::new();
        for &(group_id, owner) in &traffic.owners {
            let (messages, last_msg_id) = api.pull_all(owner, group_id).await;
            verdict.check_group(group_id, &messages, last_msg_id, &acknowledged, &mut stored);
        }
        verdict.check_acknowledged(&acknowledged, &stored);
        verdict.check_cursors(api, traffic).await;
        verdict
    }

    pub fn is_clean(&self) -> bool {
        self.lost.is_empty()
            && self.duplicated.is_empty()
            && self.gaps.is_empty()
            && self.backwards.is_empty()
            && self.unknown.is_empty()
            && self.problems.is_empty()
    }

    /// A group read from after_msg_id=0: contiguous ids, each client_msg_id once, each message
    /// one that a sender was told about. System lines are counted, not matched.
    fn check_group(
        &mut self,
        group_id: i64,
        entries: &[StoredMessage],
        last_msg_id: i64,
        acknowledged: &HashMap<&str, &AcknowledgedSend>,
        stored: &mut StoredAt,
    ) {
        // Messages and lines share the ids, in the order the pages listed them.
        let ids: Vec<i64> = entries.iter().map(|m| m.msg_id).collect();
        let (messages, lines): (Vec<&StoredMessage>, Vec<&StoredMessage>) =
            entries.iter().partition(|m| m.kind == "message");
        self.stored += messages.len();
        self.system_lines.insert(group_id, lines.len());
        if ids != (1..=last_msg_id).collect::<Vec<i64>>() {
            let mut seen = ids.clone();
            seen.dedup();
            self.gaps.push(format!(
                "group {group_id}: {} ids for last_msg_id {last_msg_id} ({} distinct)",
                ids.len(),
                seen.len()
            ));
        }
        for m in messages {
            if stored
                .insert(m.client_msg_id.clone(), (group_id, m.msg_id))
                .is_some()
            {
                self.duplicated.push(format!(
                    "{} stored twice (again as {group_id}/{})",
                    m.client_msg_id, m.msg_id
                ));
            }
            match acknowledged.get(m.client_msg_id.as_str()) {
                Some(a) if a.sender_id == m.sender_id && a.content == m.content => {}
                Some(a) => self.problems.push(format!(
                    "{} stored as sent by {} with content {:?}, sent by {} as {:?}",
                    m.client_msg_id, m.sender_id, m.content, a.sender_id, a.content
                )),
                None => self.unknown.push(format!(
                    "{group_id}/{} ({}) was never acknowledged",
                    m.msg_id, m.client_msg_id
                )),
            }
        }
    }

    /// Every acknowledged send is stored, with the group and id it was given.
    fn check_acknowledged(
        &mut self,
        acknowledged: &HashMap<&str, &AcknowledgedSend>,
        stored: &StoredAt,
    ) {
        for a in acknowledged.values() {
            match stored.get(a.client_msg_id.as_str()) {
                Some(&found) if found == (a.group_id, a.msg_id) => {}
                Some(&(group_id, msg_id)) => self.lost.push(format!(
                    "{} acknowledged as {}/{} but stored as {group_id}/{msg_id}",
                    a.client_msg_id, a.group_id, a.msg_id
                )),
                None => self.lost.push(format!(
                    "{} acknowledged as {}/{} but not stored",
                    a.client_msg_id, a.group_id, a.msg_id
                )),
            }
        }
    }

    /// The members' findings during the run, and their final cursors: at least the highest
    /// any 2xx response reported.
    async fn check_cursors(&mut self, api: &ApiClient, traffic: &mut Traffic) {
        for member in &mut traffic.members {
            self.backwards.append(&mut member.backwards);
            self.gaps.append(&mut member.gaps);
            self.problems.append(&mut member.problems);
            for &group_id in &member.groups {
                let (ack, read) = api.cursors(&member.user, group_id).await;
                let (high_ack, high_read) =
                    member.highest.get(&group_id).copied().unwrap_or((0, 0));
                if ack < high_ack || read < high_read {
                    self.backwards.push(format!(
                        "{} in group {group_id}: final (ack {ack}, read {read}) below reported \
                         (ack {high_ack}, read {high_read})",
                        member.user
                    ));
                }
            }
        }
    }
}
