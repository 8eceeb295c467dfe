//! Read receipts of messages, derived from the members' cursors with range counts on the
//! cursor indexes, so their cost follows the members on the smaller side of each cursor, not
//! the size of the group.
//!
//! No row per (message, recipient) exists: a member has read message `m` when their
//! `last_read_msg_id >= m`, and has it delivered (to at least one of their devices) when
//! `delivered_msg_id >= m`, so one ack covering 1..N marks all N read with one row written.
//! The audience of `m` is the members who joined before it (`joined_after_msg_id < m`) and
//! are still members, minus its sender.
//!
//! A member's cursors start where they joined and never go back, so every member who joined
//! after `m` also has both cursors at or above `m`. That turns each count into differences of
//! "how many members have this cursor at or above `m`", which an index on (group, cursor)
//! answers by reading one side of `m`: the side with fewer members on it.

use diesel::connection::SimpleConnection;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Nullable, Text};

use super::raw_sql::RawSql;
use super::AnyConnection;
use crate::domain::{GroupId, MsgId};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReceiptCounts {
    pub read_count: i64,
    pub unread_count: i64,
    pub delivered_count: i64,
}

/// The receipt counts of messages `msg_ids` of one sender in one group, in the order given,
/// all read in one snapshot. A constant number of statements however many messages: the
/// group's size and the sender's row, the counts at the newest message, and one histogram of
/// the cursors that fall between the oldest and the newest.
pub fn receipt_counts(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
    msg_ids: &[MsgId],
) -> QueryResult<Vec<ReceiptCounts>> {
    if msg_ids.is_empty() {
        return Ok(Vec::new());
    }
    in_snapshot(conn, |conn| {
        counts_in_snapshot(conn, group_id, sender_id, msg_ids)
    })
}

/// One message's receipt counts and a page of its audience (see [`audience_page`]), read in
/// one snapshot so the page and the counts agree.
pub fn message_receipts(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
    sender_id: &str,
    after: Option<&str>,
    limit: i64,
) -> QueryResult<(ReceiptCounts, Vec<(String, bool)>)> {
    in_snapshot(conn, |conn| {
        let counts = counts_in_snapshot(conn, group_id, sender_id, &[msg_id])?;
        let counts = counts
            .into_iter()
            .next()
            .ok_or(diesel::result::Error::NotFound)?;
        let page = audience_page(conn, group_id, msg_id, sender_id, after, limit)?;
        Ok((counts, page))
    })
}

/// [`receipt_counts`] inside a snapshot the caller holds; `msg_ids` is not empty.
fn counts_in_snapshot(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
    msg_ids: &[MsgId],
) -> QueryResult<Vec<ReceiptCounts>> {
    let mut ascending: Vec<i64> = msg_ids.iter().map(|m| m.0).collect();
    ascending.sort_unstable();
    ascending.dedup();
    let standing = group_standing(conn, group_id, sender_id)?;
    let at_or_above = CursorTallies::count(conn, group_id, standing.members, &ascending)?;
    Ok(msg_ids
        .iter()
        .map(|m| standing.counts(m.0, &at_or_above.at(m.0)))
        .collect())
}

/// One page of a message's audience in user id order, after `after`: each member with
/// whether they have read it.
fn audience_page(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: MsgId,
    sender_id: &str,
    after: Option<&str>,
    limit: i64,
) -> QueryResult<Vec<(String, bool)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = Text)]
        user_id: String,
        #[diesel(sql_type = BigInt)]
        last_read_msg_id: i64,
    }
    let mut query = RawSql::default()
        .sql("SELECT user_id, last_read_msg_id FROM group_members WHERE group_id = ")
        .int(group_id.0)
        .sql(" AND joined_after_msg_id < ")
        .int(msg_id.0)
        .sql(" AND user_id <> ")
        .text(sender_id);
    if let Some(after) = after {
        query = query.sql(" AND user_id > ").text(after);
    }
    let rows: Vec<Row> = query
        .sql(" ORDER BY user_id LIMIT ")
        .int(limit)
        .load(conn)?;
    Ok(rows
        .into_iter()
        .map(|r| (r.user_id, r.last_read_msg_id >= msg_id.0))
        .collect())
}

/// Runs `f` in one read-only snapshot: counts taken by several statements must all see the
/// same members, or a member joining between two of them would be counted on one side only.
/// PostgreSQL's default isolation takes a snapshot per statement, so this asks for
/// REPEATABLE READ; SQLite keeps one snapshot for a transaction from its first read.
fn in_snapshot<T>(
    conn: &mut AnyConnection,
    f: impl FnOnce(&mut AnyConnection) -> QueryResult<T>,
) -> QueryResult<T> {
    let begin = match conn {
        AnyConnection::Postgresql(_) => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        AnyConnection::Sqlite(_) => "BEGIN",
    };
    conn.batch_execute(begin)?;
    match f(conn) {
        Ok(value) => {
            conn.batch_execute("COMMIT")?;
            Ok(value)
        }
        Err(e) => {
            // The read's own error is the one to report; a failed rollback leaves a
            // connection the pool's health check discards.
            let _ = conn.batch_execute("ROLLBACK");
            Err(e)
        }
    }
}

/// The cursors of the sender, who is never in their own message's audience.
#[derive(Debug, Clone, Copy)]
struct SenderCursors {
    joined_after: i64,
    read: i64,
    delivered: i64,
}

/// The group's size and, if the sender is still a member, their cursors.
#[derive(Debug, Clone, Copy)]
struct Standing {
    members: i64,
    sender: Option<SenderCursors>,
}

fn group_standing(
    conn: &mut AnyConnection,
    group_id: GroupId,
    sender_id: &str,
) -> QueryResult<Standing> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        member_count: i64,
        #[diesel(sql_type = Nullable<BigInt>)]
        joined_after_msg_id: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        last_read_msg_id: Option<i64>,
        #[diesel(sql_type = Nullable<BigInt>)]
        delivered_msg_id: Option<i64>,
    }
    let rows: Vec<Row> = RawSql::default()
        .sql(
            "SELECT g.member_count, m.joined_after_msg_id, m.last_read_msg_id, \
             m.delivered_msg_id FROM groups g LEFT JOIN group_members m \
             ON m.group_id = g.group_id AND m.user_id = ",
        )
        .text(sender_id)
        .sql(" WHERE g.group_id = ")
        .int(group_id.0)
        .load(conn)?;
    let row = rows
        .into_iter()
        .next()
        .ok_or(diesel::result::Error::NotFound)?;
    let sender = match (
        row.joined_after_msg_id,
        row.last_read_msg_id,
        row.delivered_msg_id,
    ) {
        (Some(joined_after), Some(read), Some(delivered)) => Some(SenderCursors {
            joined_after,
            read,
            delivered,
        }),
        _ => None,
    };
    Ok(Standing {
        members: row.member_count,
        sender,
    })
}

impl Standing {
    /// The counts of message `msg_id` from how many members (the sender included) have each
    /// cursor at or above it.
    fn counts(&self, msg_id: i64, at_or_above: &Tally) -> ReceiptCounts {
        // Members who joined at or after the message have both cursors at or above it too.
        let late = at_or_above.joined;
        let mut audience = self.members - late;
        let mut read = at_or_above.read - late;
        let mut delivered = at_or_above.delivered - late;
        if let Some(s) = self.sender.filter(|s| s.joined_after < msg_id) {
            audience -= 1;
            read -= i64::from(s.read >= msg_id);
            delivered -= i64::from(s.delivered >= msg_id);
        }
        ReceiptCounts {
            read_count: read,
            unread_count: audience - read,
            delivered_count: delivered,
        }
    }
}

/// How many members have each cursor at or above one message id.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    read: i64,
    delivered: i64,
    joined: i64,
}

/// A cursor column of `group_members` with an index on (group_id, column).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cursor {
    Read,
    Delivered,
    Joined,
}

const CURSORS: [Cursor; 3] = [Cursor::Read, Cursor::Delivered, Cursor::Joined];

impl Cursor {
    fn column(self) -> &'static str {
        match self {
            Cursor::Read => "last_read_msg_id",
            Cursor::Delivered => "delivered_msg_id",
            Cursor::Joined => "joined_after_msg_id",
        }
    }

    fn of(self, tally: &mut Tally) -> &mut i64 {
        match self {
            Cursor::Read => &mut tally.read,
            Cursor::Delivered => &mut tally.delivered,
            Cursor::Joined => &mut tally.joined,
        }
    }
}

/// Tallies at every message id asked for: one at the newest, plus, for the older ones, how
/// many cursors sit at each value between the oldest and the newest.
struct CursorTallies {
    newest: i64,
    at_newest: Tally,
    /// (cursor, value, members with that cursor at exactly that value), for values in
    /// [oldest, newest).
    between: Vec<(Cursor, i64, i64)>,
}

impl CursorTallies {
    /// `ascending` holds distinct ids, oldest first, and is not empty.
    fn count(
        conn: &mut AnyConnection,
        group_id: GroupId,
        members: i64,
        ascending: &[i64],
    ) -> QueryResult<CursorTallies> {
        let (oldest, newest) = (ascending[0], ascending[ascending.len() - 1]);
        let at_newest = tally_at(conn, group_id, members, newest)?;
        let between = if oldest < newest {
            histogram(conn, group_id, oldest, newest)?
        } else {
            Vec::new()
        };
        Ok(CursorTallies {
            newest,
            at_newest,
            between,
        })
    }

    /// The tally at `msg_id`, one of the ids counted.
    fn at(&self, msg_id: i64) -> Tally {
        let mut tally = self.at_newest;
        for &(cursor, value, members) in &self.between {
            if value >= msg_id && value < self.newest {
                *cursor.of(&mut tally) += members;
            }
        }
        tally
    }
}

/// Which side of a message id a count reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Cursors at or above the id.
    AtOrAbove,
    Below,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::AtOrAbove => Side::Below,
            Side::Below => Side::AtOrAbove,
        }
    }

    fn operator(self) -> &'static str {
        match self {
            Side::AtOrAbove => ">=",
            Side::Below => "<",
        }
    }
}

/// One count in a probe: members with `cursor` on `side` of the id, stopping at `limit`.
#[derive(Debug, Clone, Copy)]
struct Count {
    cursor: Cursor,
    side: Side,
    limit: Option<i64>,
}

/// How many members have each cursor at or above `msg_id`. A cursor is first counted on the
/// side it most likely has fewer members on, stopping once past half the group; only when
/// that side holds more than half is the other side counted instead. So each cursor costs at
/// most about half the group's index entries, and for the usual message (recent: few have
/// read it; or old: few have not) far fewer.
///
/// The read cursor is counted above first: most receipts asked for are of recent messages.
/// The delivered cursor is never below the read one, so it is counted on whichever side the
/// read count turned out small on. Members joining after a message are few above it.
fn tally_at(
    conn: &mut AnyConnection,
    group_id: GroupId,
    members: i64,
    msg_id: i64,
) -> QueryResult<Tally> {
    let half = Some(members / 2 + 1);
    let first = |cursor: Cursor, side: Side| Count {
        cursor,
        side,
        limit: half,
    };
    let settle = |found: i64, count: Count| match count.limit {
        Some(limit) if found >= limit => None,
        _ => Some(above(members, count.side, found)),
    };
    let read_first = first(Cursor::Read, Side::AtOrAbove);
    let joined_first = first(Cursor::Joined, Side::AtOrAbove);
    let found = probe(conn, group_id, msg_id, &[read_first, joined_first])?;
    let (read, joined) = (settle(found[0], read_first), settle(found[1], joined_first));
    let delivered_side = if read.is_some() {
        Side::AtOrAbove
    } else {
        Side::Below
    };
    let delivered_first = first(Cursor::Delivered, delivered_side);
    let mut second = vec![delivered_first];
    for (settled, cursor) in [(read, Cursor::Read), (joined, Cursor::Joined)] {
        if settled.is_none() {
            second.push(rest(cursor, Side::AtOrAbove));
        }
    }
    let found = probe(conn, group_id, msg_id, &second)?;
    let mut tally = Tally::default();
    for (count, n) in second.iter().zip(&found).skip(1) {
        *count.cursor.of(&mut tally) = above(members, count.side, *n);
    }
    if let Some(read) = read {
        tally.read = read;
    }
    if let Some(joined) = joined {
        tally.joined = joined;
    }
    tally.delivered = match settle(found[0], delivered_first) {
        Some(delivered) => delivered,
        None => {
            let other = rest(Cursor::Delivered, delivered_side);
            above(
                members,
                other.side,
                probe(conn, group_id, msg_id, &[other])?[0],
            )
        }
    };
    Ok(tally)
}

/// The full count of `cursor` on the side other than `crowded`.
fn rest(cursor: Cursor, crowded: Side) -> Count {
    Count {
        cursor,
        side: crowded.other(),
        limit: None,
    }
}

/// Members at or above the id, from `found` members on `side` of it.
fn above(members: i64, side: Side, found: i64) -> i64 {
    match side {
        Side::AtOrAbove => found,
        Side::Below => members - found,
    }
}

/// The given counts around `msg_id`, in one statement (so in one snapshot, and one round
/// trip), each a range of one cursor index.
fn probe(
    conn: &mut AnyConnection,
    group_id: GroupId,
    msg_id: i64,
    counts: &[Count],
) -> QueryResult<Vec<i64>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        i: i64,
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let mut query = RawSql::default();
    for (i, count) in counts.iter().enumerate() {
        if i > 0 {
            query = query.sql(" UNION ALL ");
        }
        let condition = format!(" AND {} {} ", count.cursor.column(), count.side.operator());
        query = query
            .sql(&format!(
                "SELECT CAST({i} AS BIGINT) AS i, (SELECT count(*) FROM \
                 (SELECT 1 FROM group_members WHERE group_id = "
            ))
            .int(group_id.0)
            .sql(&condition)
            .int(msg_id);
        if let Some(limit) = count.limit {
            query = query.sql(" LIMIT ").int(limit);
        }
        query = query.sql(") AS t) AS n");
    }
    let mut rows: Vec<Row> = query.load(conn)?;
    // UNION ALL promises no order: each row carries its count's index.
    rows.sort_by_key(|r| r.i);
    if rows.len() != counts.len() {
        return Err(diesel::result::Error::NotFound);
    }
    Ok(rows.into_iter().map(|r| r.n).collect())
}

/// How many members have each cursor at exactly each value in [oldest, newest).
fn histogram(
    conn: &mut AnyConnection,
    group_id: GroupId,
    oldest: i64,
    newest: i64,
) -> QueryResult<Vec<(Cursor, i64, i64)>> {
    #[derive(QueryableByName)]
    struct Row {
        #[diesel(sql_type = BigInt)]
        cursor_index: i64,
        #[diesel(sql_type = BigInt)]
        value: i64,
        #[diesel(sql_type = BigInt)]
        members: i64,
    }
    let mut query = RawSql::default();
    for (i, cursor) in CURSORS.iter().enumerate() {
        if i > 0 {
            query = query.sql(" UNION ALL ");
        }
        let column = cursor.column();
        query = query
            .sql(&format!(
                "SELECT CAST({i} AS BIGINT) AS cursor_index, {column} AS value, \
                 count(*) AS members \
                 FROM group_members WHERE group_id = "
            ))
            .int(group_id.0)
            .sql(&format!(" AND {column} >= "))
            .int(oldest)
            .sql(&format!(" AND {column} < "))
            .int(newest)
            .sql(&format!(" GROUP BY {column}"));
    }
    let rows: Vec<Row> = query.load(conn)?;
    Ok(rows
        .into_iter()
        .filter_map(|r| {
            let cursor = *CURSORS.get(usize::try_from(r.cursor_index).ok()?)?;
            Some((cursor, r.value, r.members))
        })
        .collect())
}
