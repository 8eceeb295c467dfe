//! The receipt change feed's rows: which ranges of a group's messages may have new receipt counts,
//! for senders' long-polls (the counts themselves: [`crate::db::read_models::receipt_counts`]).

use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{BigInt, Timestamp};

use crate::db::engine::raw_sql::{RawSql, Value};
use crate::db::models::now_utc;
use crate::db::AnyConnection;
use crate::domain::{GroupId, MsgId};
use crate::schema::receipt_events;

#[derive(Insertable)]
#[diesel(table_name = receipt_events)]
struct NewReceiptEvent<'a> {
    group_id: i64,
    reader_id: &'a str,
    from_msg_id: i64,
    to_msg_id: i64,
    created_at: NaiveDateTime,
}

/// Records that receipts of messages in `(from_msg_id, to_msg_id]` of the group may have changed.
pub fn record_change(
    conn: &mut AnyConnection,
    group_id: GroupId,
    reader_id: &str,
    from_msg_id: MsgId,
    to_msg_id: MsgId,
) -> QueryResult<()> {
    record_changes(conn, &[(reader_id, group_id, from_msg_id, to_msg_id)])
}

/// [`record_change`] for several readers and groups, in one statement per 500 ranges.
pub fn record_changes(
    conn: &mut AnyConnection,
    ranges: &[(&str, GroupId, MsgId, MsgId)],
) -> QueryResult<()> {
    for statement in changes_statements(ranges) {
        statement.execute(conn)?;
    }
    Ok(())
}

/// The statements [`record_changes`] runs (none for no ranges), for a caller that runs them
/// beside others.
pub fn changes_statements(ranges: &[(&str, GroupId, MsgId, MsgId)]) -> Vec<RawSql> {
    let created_at = now_utc();
    ranges
        .chunks(500)
        .map(|chunk| {
            let rows: Vec<Vec<Value<'_>>> = chunk
                .iter()
                .map(|&(reader_id, group_id, from, to)| {
                    vec![
                        Value::Int(group_id.0),
                        Value::Text(reader_id),
                        Value::Int(from.0),
                        Value::Int(to.0),
                    ]
                })
                .collect();
            // Kept prepared: on PostgreSQL the text is the same for any number of rows, on
            // SQLite for one (an ack of one group).
            RawSql::default()
                .sql(
                    "INSERT INTO receipt_events \
                     (group_id, reader_id, from_msg_id, to_msg_id, created_at) \
                     SELECT t.g, t.r, t.f, t.t, ",
                )
                .time(created_at)
                .sql(" FROM ")
                .rows("t", &["g", "r", "f", "t"], &rows)
                .keep_prepared()
        })
        .collect()
}

/// Deletes up to `batch` receipt changes older than `cutoff`; returns how many went. Small
/// batches keep each transaction (and SQLite's single writer) short.
pub fn delete_changes_before(
    conn: &mut AnyConnection,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    delete_oldest_before(conn, "receipt_events", cutoff, batch)
}

/// Deletes up to `batch` of the oldest rows of a feed table (one with an `id` in insertion order
/// and a `created_at`) created before `cutoff`; returns how many went.
pub(in crate::db) fn delete_oldest_before(
    conn: &mut AnyConnection,
    table: &'static str,
    cutoff: NaiveDateTime,
    batch: i64,
) -> QueryResult<usize> {
    diesel::sql_query(format!(
        "DELETE FROM {table} WHERE id IN \
         (SELECT id FROM {table} WHERE created_at < $1 ORDER BY id LIMIT $2)"
    ))
    .bind::<Timestamp, _>(cutoff)
    .bind::<BigInt, _>(batch)
    .execute(conn)
}
