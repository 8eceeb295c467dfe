//! What the group's log says after the last restart, against what the lanes were told: every
//! acknowledged entry stored once where it was told, ids without gaps, and every message in
//! the state its change entries give it (no entry without its effect, no effect without its
//! entry).

use std::collections::HashMap;

use super::lane::{Acknowledged, Ask, ChangeLane};
use crate::support::client::StoredMessage;

#[derive(Debug, Default)]
pub struct Verdict {
    /// Ids that are not exactly 1..=last_msg_id.
    pub gaps: Vec<String>,
    /// Entries stored twice, acknowledged ones missing or stored otherwise than told, entries
    /// nobody was told about.
    pub log: Vec<String>,
    /// Messages whose stored state is not what the log's change entries make it.
    pub half_applied: Vec<String>,
    /// Requests still unanswered, refusals, bodies that did not fit.
    pub problems: Vec<String>,
    /// Change entries read back.
    pub changes: usize,
}

/// A message as the log's entries, replayed in order, make it: (kind, content, edited).
type Expected = (&'static str, String, bool);

impl Verdict {
    pub fn judge(lanes: &[ChangeLane], entries: &[StoredMessage], last_msg_id: i64) -> Verdict {
        let mut verdict = Verdict::default();
        for lane in lanes {
            verdict.problems.extend(lane.problems.iter().cloned());
            verdict.problems.extend(
                lane.pending
                    .iter()
                    .map(|r| format!("{} never answered", r.client_msg_id)),
            );
        }
        let ids: Vec<i64> = entries.iter().map(|e| e.msg_id).collect();
        if ids != (1..=last_msg_id).collect::<Vec<i64>>() {
            verdict.gaps.push(format!(
                "{} entries listed for last_msg_id {last_msg_id}",
                ids.len()
            ));
        }
        let told: HashMap<(&str, &str), &Acknowledged> = lanes
            .iter()
            .flat_map(|lane| lane.acknowledged.iter().map(move |a| (lane.user, a)))
            .map(|(user, a)| ((user, a.request.client_msg_id.as_str()), a))
            .collect();
        let by_key = verdict.check_log(entries, &told);
        verdict.check_acknowledged(&told, &by_key);
        verdict.replay(entries, &told);
        verdict
    }

    /// The first few findings of each kind, for a failure message.
    pub fn findings(&self) -> String {
        let first = |items: &[String]| items.iter().take(5).cloned().collect::<Vec<_>>();
        format!(
            "gaps {:?}, log {:?}, half-applied {:?}, problems {:?}",
            first(&self.gaps),
            first(&self.log),
            first(&self.half_applied),
            first(&self.problems)
        )
    }

    pub fn is_clean(&self) -> bool {
        self.gaps.is_empty()
            && self.log.is_empty()
            && self.half_applied.is_empty()
            && self.problems.is_empty()
    }

    /// Each entry once under its sender's key, and each one a lane was told about.
    fn check_log<'a>(
        &mut self,
        entries: &'a [StoredMessage],
        told: &HashMap<(&str, &str), &Acknowledged>,
    ) -> HashMap<(&'a str, &'a str), &'a StoredMessage> {
        let mut by_key = HashMap::new();
        for e in entries {
            let key = (e.sender_id.as_str(), e.client_msg_id.as_str());
            if by_key.insert(key, e).is_some() {
                self.log
                    .push(format!("{key:?} stored twice (again as {})", e.msg_id));
            }
            if !told.contains_key(&key) {
                self.log.push(format!(
                    "entry {} ({} {key:?}) was never acknowledged",
                    e.msg_id, e.kind
                ));
            }
            if e.target_msg_id.is_some() {
                self.changes += 1;
            }
        }
        by_key
    }

    /// Every acknowledged request's entry is where the answer said, as asked.
    fn check_acknowledged(
        &mut self,
        told: &HashMap<(&str, &str), &Acknowledged>,
        by_key: &HashMap<(&str, &str), &StoredMessage>,
    ) {
        for (key, a) in told {
            let Some(e) = by_key.get(key) else {
                self.log.push(format!(
                    "{key:?} acknowledged as {} but not stored",
                    a.msg_id
                ));
                continue;
            };
            // A message's kind changes when it is recalled or deleted; a change entry's never.
            let kind_fits = match a.request.ask {
                Ask::Send { .. } => ["message", "recalled", "deleted"].contains(&e.kind.as_str()),
                ref ask => e.kind == ask.kind(),
            };
            if e.msg_id != a.msg_id || !kind_fits || e.target_msg_id != a.request.ask.target() {
                self.log.push(format!(
                    "{key:?} acknowledged as {} {:?}, stored as {} {} (target {:?})",
                    a.msg_id, a.request.ask, e.msg_id, e.kind, e.target_msg_id
                ));
            }
        }
    }

    /// Replays the log in order from the messages as sent, then compares each message with
    /// what it is stored as.
    fn replay(&mut self, entries: &[StoredMessage], told: &HashMap<(&str, &str), &Acknowledged>) {
        let mut expected: HashMap<i64, Expected> = HashMap::new();
        for e in entries {
            let Some(a) = told.get(&(e.sender_id.as_str(), e.client_msg_id.as_str())) else {
                continue;
            };
            if let Err(finding) = apply(&mut expected, e.msg_id, &a.request.ask) {
                self.half_applied.push(finding);
            }
        }
        for e in entries.iter().filter(|e| e.target_msg_id.is_none()) {
            let Some((kind, content, edited)) = expected.get(&e.msg_id) else {
                continue;
            };
            // A recall or delete keeps edited_at, so it is only checked on live messages.
            let edited_fits = *kind != "message" || e.edited == *edited;
            if e.kind != *kind || e.content != *content || !edited_fits {
                self.half_applied.push(format!(
                    "message {}: stored {} {:?} (edited: {}), the log makes it {kind} \
                     {content:?} (edited: {edited})",
                    e.msg_id, e.kind, e.content, e.edited
                ));
            }
        }
    }
}

/// What entry `msg_id`, asked as `ask`, does to the messages before it.
fn apply(expected: &mut HashMap<i64, Expected>, msg_id: i64, ask: &Ask) -> Result<(), String> {
    let (target, kind, new_text) = match ask {
        Ask::Send { content } => {
            expected.insert(msg_id, ("message", content.clone(), false));
            return Ok(());
        }
        Ask::Recall { target } => (*target, "recalled", None),
        Ask::Delete { target } => (*target, "deleted", None),
        Ask::Edit { target, content } => (*target, "message", Some(content)),
    };
    let Some(state) = expected.get_mut(&target) else {
        return Err(format!(
            "change {msg_id} names {target}, no earlier message"
        ));
    };
    if state.0 != "message" {
        return Err(format!("change {msg_id} of {target}, already {}", state.0));
    }
    *state = match new_text {
        Some(text) => (kind, text.clone(), true),
        None => (kind, String::new(), state.2),
    };
    Ok(())
}
