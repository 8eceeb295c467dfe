//! Wake-ups: the events that end long-polls, what a write records of them, and their wire
//! form between instances.
//!
//! An event names only where to look again (a group, a user), never the data itself: a woken
//! poller re-reads the database, so a duplicated or spurious wake-up costs one query and a
//! lost one costs at most one poll timeout. A waiting long-poll registers for the events it
//! cares about, and a write records the events it causes in [`Wakes`]; the database layer
//! announces them to other instances and wakes this process's waiters once it commits.

use crate::domain::GroupId;

/// Something changed that long-polls may be waiting for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WakeEvent {
    /// A message was stored in the group: `/v1/sync` pollers among its members.
    MessageSent(GroupId),
    /// A member's cursor moved in the group: `/v1/receipts` pollers among its senders.
    CursorMoved(GroupId),
    /// The user joined or left a group: their pollers re-read their group list.
    MembershipChanged(String),
    /// The user's read cursor moved in some group: their other devices' `/v1/sync` pollers.
    ReadMoved(String),
}

/// The wake-ups one write causes, recorded as it runs (see `Db::write`), and the groups in
/// which it wrote feed rows (messages, receipt changes, member events) that publication has
/// yet to give positions: where rows are spread over shards by group, publication then looks
/// in those groups' shards alone. A group left out costs only time: every publisher also
/// sweeps all of them every second.
#[derive(Debug, Default)]
pub struct Wakes {
    events: Vec<WakeEvent>,
    feed_groups: Vec<i64>,
}

impl Wakes {
    /// Duplicates are harmless: PostgreSQL folds identical notifications of one transaction,
    /// and a second local wake-up of a waiter that is already awake does nothing. A message
    /// stored or a cursor moved in a group also means feed rows in that group.
    pub fn record(&mut self, event: WakeEvent) {
        if let WakeEvent::MessageSent(group_id) | WakeEvent::CursorMoved(group_id) = event {
            self.feed_rows_in(group_id);
        }
        self.events.push(event);
    }

    /// The write added feed rows in the group (for the events that name a user, not the
    /// group: member events).
    pub fn feed_rows_in(&mut self, group_id: GroupId) {
        self.feed_groups.push(group_id.0);
    }

    pub fn events(&self) -> &[WakeEvent] {
        &self.events
    }

    pub fn feed_groups(&self) -> &[i64] {
        &self.feed_groups
    }
}

/// The PostgreSQL NOTIFY channel all instances listen on.
pub const CHANNEL: &str = "chorus";

impl WakeEvent {
    /// `<instance> <kind> <id>`; the instance lets a listener skip its own events, which it
    /// already delivered in process.
    pub fn encode(&self, instance: &str) -> String {
        match self {
            WakeEvent::MessageSent(g) => format!("{instance} m {g}"),
            WakeEvent::CursorMoved(g) => format!("{instance} r {g}"),
            WakeEvent::MembershipChanged(u) => format!("{instance} u {u}"),
            WakeEvent::ReadMoved(u) => format!("{instance} v {u}"),
        }
    }

    /// The event and the instance that sent it; None for a payload this version cannot read.
    pub fn decode(payload: &str) -> Option<(&str, WakeEvent)> {
        let mut parts = payload.splitn(3, ' ');
        let instance = parts.next()?;
        let kind = parts.next()?;
        let id = parts.next()?;
        let event = match kind {
            "m" => WakeEvent::MessageSent(GroupId(id.parse().ok()?)),
            "r" => WakeEvent::CursorMoved(GroupId(id.parse().ok()?)),
            "u" => WakeEvent::MembershipChanged(id.to_owned()),
            "v" => WakeEvent::ReadMoved(id.to_owned()),
            _ => return None,
        };
        Some((instance, event))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_or_a_cursor_move_names_its_group_for_publication_and_a_user_event_does_not() {
        let mut wakes = Wakes::default();
        wakes.record(WakeEvent::MessageSent(GroupId(3)));
        wakes.record(WakeEvent::CursorMoved(GroupId(4)));
        wakes.record(WakeEvent::ReadMoved("bob".into()));
        assert_eq!(wakes.feed_groups(), [3, 4]);
        wakes.feed_rows_in(GroupId(5));
        assert_eq!(wakes.feed_groups(), [3, 4, 5]);
        assert_eq!(wakes.events().len(), 3);
    }

    #[test]
    fn events_round_trip_through_their_payload() {
        for event in [
            WakeEvent::MessageSent(GroupId(7)),
            WakeEvent::CursorMoved(GroupId(9)),
            WakeEvent::MembershipChanged("alice@x".into()),
            WakeEvent::ReadMoved("bob".into()),
        ] {
            let payload = event.encode("i1");
            assert_eq!(WakeEvent::decode(&payload), Some(("i1", event)));
        }
        assert_eq!(WakeEvent::decode("i1 z 3"), None);
        assert_eq!(WakeEvent::decode("garbage"), None);
    }
}
