//! Cursors that follow a member's own entries: after a member appends to a group's log, each
//! of their cursors that had everything before the entries moves onto them, so their own
//! entries are never unread and nothing they had not received is skipped.

use std::collections::HashMap;

use diesel::prelude::*;

use super::access::Membership;
use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::member_cursors::cursor_counts::{CursorMoves, MemberCursors};
use crate::db::models::MemberRow;
use crate::db::AnyConnection;
use crate::domain::{DeviceId, GroupId, MsgId};

/// An entry a member just appended to a group's log: its id, the device it came from (None:
/// the member's default device), and whether it counts as unread (a message; a change entry
/// does not).
#[derive(Debug, Clone, Copy)]
pub struct OwnEntry<'a> {
    pub msg_id: MsgId,
    pub device: Option<&'a DeviceId>,
    pub counted: bool,
}

/// Where a cursor goes after a member's own entries, if it stands at `from`: onto the last of
/// the entries that follow `from` without a gap. A cursor elsewhere stays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Follow {
    pub from: i64,
    pub to: i64,
}

impl Follow {
    /// Never matches a cursor (cursors are never negative): for a cursor none of the entries
    /// move.
    const NOWHERE: Follow = Follow { from: -1, to: -1 };

    /// The rule for one cursor over the entries that may move it (ascending): each entry the
    /// cursor stood just before when it was appended moves the cursor onto it, so the cursor
    /// follows the first entry and each one after it without a gap, and stops at the first
    /// gap (an entry of someone else) for good.
    pub fn over(ids: impl IntoIterator<Item = i64>) -> Follow {
        let mut ids = ids.into_iter();
        let Some(first) = ids.next() else {
            return Follow::NOWHERE;
        };
        let mut to = first;
        for id in ids {
            if id != to + 1 {
                break;
            }
            to = id;
        }
        Follow {
            from: first - 1,
            to,
        }
    }
}

/// How one member's cursors move after their own entries, decided from the entries alone;
/// [`OwnMoves::applied_to`] then places each cursor from where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
struct OwnMoves {
    /// The read cursor and the delivered-anywhere cursor: every entry moves them.
    read: Follow,
    /// The default device's delivered cursor: entries from the default device move it.
    default_device: Follow,
    /// Entries counted as unread that the read cursor would not move onto, if it follows
    /// and if it does not.
    own_if_followed: i64,
    own_if_not: i64,
}

impl OwnMoves {
    fn of(entries: &[OwnEntry<'_>]) -> OwnMoves {
        let read = Follow::over(entries.iter().map(|e| e.msg_id.0));
        let default_device = Follow::over(
            entries
                .iter()
                .filter(|e| e.device.is_none())
                .map(|e| e.msg_id.0),
        );
        let counted = entries.iter().filter(|e| e.counted);
        let own_if_not = counted.clone().count() as i64;
        let own_if_followed = counted.filter(|e| e.msg_id.0 > read.to).count() as i64;
        OwnMoves {
            read,
            default_device,
            own_if_followed,
            own_if_not,
        }
    }

    /// The member's row after the moves: a cursor at its rule's `from` goes to its `to`; the
    /// count of own entries above the read cursor grows by those it does not move onto.
    fn applied_to(&self, member: &MemberRow) -> MemberRow {
        let follow = |cursor: i64, rule: Follow| match cursor == rule.from {
            true => rule.to,
            false => cursor,
        };
        let own_above = match member.last_read_msg_id == self.read.from {
            true => self.own_if_followed,
            false => self.own_if_not,
        };
        MemberRow {
            own_msgs_after_read: member.own_msgs_after_read + own_above,
            last_read_msg_id: follow(member.last_read_msg_id, self.read),
            delivered_msg_id: follow(member.delivered_msg_id, self.read),
            last_ack_msg_id: follow(member.last_ack_msg_id, self.default_device),
            ..member.clone()
        }
    }
}

/// After members appended entries to the group's log (each member's ascending, by user): each
/// cursor that was at an entry's predecessor (they had everything) moves onto it; a read
/// cursor that stays behind counts one more own message above it for each counted entry, the
/// only kind the unread rule counts. So their own entries are never unread, and nothing they
/// had not received is skipped. Of the device cursors only the writing device's moves.
///
/// Decided from `members`, each member's row as the caller read it after taking the group's
/// row lock and with the row locked itself ([`super::groups::lock_group_and_members`]): no
/// entry can come between theirs, and no ack or removal can move the row before the write (the
/// append's own recalls and deletes change only the count of own entries, which moves by a
/// difference). Writes nothing: returns the statements, for the caller to run with the rest
/// of the append.
pub fn advance_past_own_entries(
    group_id: GroupId,
    entries_by_user: &[(&str, Vec<OwnEntry<'_>>)],
    members: &HashMap<String, Membership>,
) -> QueryResult<OwnAdvance> {
    let mut cursor_moves = CursorMoves::default();
    let mut rows: Vec<Vec<Value<'_>>> = Vec::with_capacity(entries_by_user.len());
    for (user_id, entries) in entries_by_user {
        // Only members' entries are appended: a missing row fails the write whole.
        let was = &members
            .get(*user_id)
            .ok_or(diesel::result::Error::NotFound)?
            .member;
        let now = OwnMoves::of(entries).applied_to(was);
        cursor_moves.moved(group_id, MemberCursors::of(was), MemberCursors::of(&now));
        rows.push(vec![
            Value::Text(user_id),
            // By how much, not to what: a recall or delete in the same append may have
            // lowered the count since the row was read.
            Value::Int(now.own_msgs_after_read - was.own_msgs_after_read),
            Value::Int(now.last_read_msg_id),
            Value::Int(now.delivered_msg_id),
            Value::Int(now.last_ack_msg_id),
        ]);
    }
    let members_update = (!rows.is_empty()).then(|| {
        RawSql::default()
            .sql(
                "UPDATE group_members SET own_msgs_after_read = own_msgs_after_read + t.own_added, \
                 last_read_msg_id = t.read_to, delivered_msg_id = t.delivered_to, \
                 last_ack_msg_id = t.ack_to FROM ",
            )
            .rows(
                "t",
                &["user_id", "own_added", "read_to", "delivered_to", "ack_to"],
                &rows,
            )
            .sql(" WHERE group_members.group_id = ")
            .int(group_id.0)
            .sql(" AND group_members.user_id = t.user_id")
            .keep_prepared()
    });
    let device_moves = device_moves(entries_by_user);
    Ok(OwnAdvance {
        members: members_update,
        cursor_moves,
        device_cursors: devices_past_own(group_id, &device_moves),
    })
}

/// How each device that sent entries moves its delivered cursor: it follows the entries it
/// sent (see [`Follow`]).
fn device_moves<'a>(
    entries_by_user: &'a [(&'a str, Vec<OwnEntry<'a>>)],
) -> Vec<(&'a str, &'a DeviceId, Follow)> {
    entries_by_user
        .iter()
        .flat_map(|(user_id, entries)| {
            let mut devices: Vec<&DeviceId> = entries.iter().filter_map(|e| e.device).collect();
            devices.sort();
            devices.dedup();
            devices.into_iter().map(move |device| {
                let ids = entries
                    .iter()
                    .filter(|e| e.device == Some(device))
                    .map(|e| e.msg_id.0);
                (*user_id, device, Follow::over(ids))
            })
        })
        .collect()
}

/// What [`advance_past_own_entries`] leaves for the caller to write in the append's
/// transaction, beside its own rows.
pub struct OwnAdvance {
    members: Option<RawSql>,
    cursor_moves: CursorMoves,
    device_cursors: Option<RawSql>,
}

impl OwnAdvance {
    /// The statements that write it: the members' rows, the histogram of their cursors (see
    /// [`CursorMoves::statements`]) and the devices' cursors.
    pub fn statements(self, conn: &AnyConnection) -> Vec<RawSql> {
        let mut statements: Vec<RawSql> = self.members.into_iter().collect();
        statements.extend(self.cursor_moves.statements(conn));
        statements.extend(self.device_cursors);
        statements
    }
}

/// After devices sent entries: each device's cursor follows its entries (see
/// [`Follow`]) if it had everything before them. A device that never acked in the group has
/// no cursor row, and gets none. One statement, returned for the caller to run with the rest
/// of the append (it reads nothing the append writes); none when no device sent.
pub fn devices_past_own(group_id: GroupId, moves: &[(&str, &DeviceId, Follow)]) -> Option<RawSql> {
    if moves.is_empty() {
        return None;
    }
    let rows: Vec<Vec<Value<'_>>> = moves
        .iter()
        .map(|(user_id, device, follow)| {
            vec![
                Value::Text(user_id),
                Value::Text(device.as_str()),
                Value::Int(follow.from),
                Value::Int(follow.to),
            ]
        })
        .collect();
    Some(
        RawSql::default()
            .sql("UPDATE device_cursors SET last_ack_msg_id = t.ack_to FROM ")
            .rows("t", &["user_id", "device_id", "ack_from", "ack_to"], &rows)
            .sql(" WHERE device_cursors.group_id = ")
            .int(group_id.0)
            .sql(
                " AND device_cursors.user_id = t.user_id AND device_cursors.device_id = t.device_id \
                 AND device_cursors.last_ack_msg_id = t.ack_from",
            )
            .keep_prepared(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::models::now_utc;
    use crate::domain::entries::Role;

    fn entry(msg_id: i64, device: Option<&DeviceId>, counted: bool) -> OwnEntry<'_> {
        OwnEntry {
            msg_id: MsgId(msg_id),
            device,
            counted,
        }
    }

    #[test]
    fn a_cursor_follows_a_contiguous_run_from_just_below_its_first_entry() {
        assert_eq!(Follow::over([5, 6, 7]), Follow { from: 4, to: 7 });
        assert_eq!(Follow::over([1]), Follow { from: 0, to: 1 });
    }

    #[test]
    fn a_cursor_stops_for_good_at_the_first_gap() {
        // Message 6 is someone else's: the cursor reaches 5, and 7 finds it below 6.
        assert_eq!(Follow::over([5, 7, 8]), Follow { from: 4, to: 5 });
    }

    #[test]
    fn no_entries_move_no_cursor() {
        let none = Follow::over(std::iter::empty());
        assert!(none.from < 0, "no cursor stands at {}", none.from);
    }

    #[test]
    fn the_default_device_follows_only_its_own_entries() {
        let phone = DeviceId::parse("device_id", "phone").expect("a device id");
        // 5 and 7 from the default device, 6 from the phone, 8 from the default device.
        let entries = [
            entry(5, None, true),
            entry(6, Some(&phone), true),
            entry(7, None, true),
            entry(8, None, true),
        ];
        let moves = OwnMoves::of(&entries);
        assert_eq!(moves.read, Follow { from: 4, to: 8 });
        // The phone's message comes between: the default device's cursor stops at 5.
        assert_eq!(moves.default_device, Follow { from: 4, to: 5 });
    }

    #[test]
    fn own_entries_above_the_read_cursor_are_counted_only_if_it_stays_below_them() {
        // 5, 6 and 9 are the member's; 7 and 8 someone else's; 6 is a change entry (an
        // edit), which never counts as unread.
        let entries = [
            entry(5, None, true),
            entry(6, None, false),
            entry(9, None, true),
        ];
        let moves = OwnMoves::of(&entries);
        assert_eq!(moves.read, Follow { from: 4, to: 6 });
        assert_eq!(moves.own_if_followed, 1, "9 stays above the cursor at 6");
        assert_eq!(moves.own_if_not, 2, "5 and 9 above a cursor left behind");
    }

    fn member(read: i64, delivered: i64, acked: i64, own: i64) -> MemberRow {
        MemberRow {
            group_id: 1,
            user_id: "ann".into(),
            role: Role::Member,
            joined_after_msg_id: 0,
            last_ack_msg_id: acked,
            last_read_msg_id: read,
            joined_at: now_utc(),
            delivered_msg_id: delivered,
            own_msgs_after_read: own,
        }
    }

    #[test]
    fn cursors_at_the_first_entrys_predecessor_follow_and_others_stay() {
        let phone = DeviceId::parse("device_id", "phone").expect("a device id");
        // 5 from the phone, 6 from the default device.
        let moves = OwnMoves::of(&[entry(5, Some(&phone), true), entry(6, None, true)]);
        let caught_up = moves.applied_to(&member(4, 4, 4, 0));
        assert_eq!(
            (caught_up.last_read_msg_id, caught_up.delivered_msg_id),
            (6, 6)
        );
        assert_eq!(
            caught_up.own_msgs_after_read, 0,
            "nothing of theirs is unread"
        );
        // The default device's cursor waits below the phone's message.
        assert_eq!(caught_up.last_ack_msg_id, 4);
        // Behind (read up to 2, delivered up to 3): both own messages count above the read
        // cursor, and no cursor skips 3 or 4, which the member has not read.
        let behind = moves.applied_to(&member(2, 3, 3, 1));
        assert_eq!((behind.last_read_msg_id, behind.delivered_msg_id), (2, 3));
        assert_eq!(behind.own_msgs_after_read, 3);
    }
}
