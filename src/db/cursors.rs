//! Acks: moving members' cursors forward, one group or many in one transaction.

use diesel::prelude::*;

use super::announce::announce;
use super::members::{access, advance_cursors, Access};
use super::receipts::record_change;
use super::AnyConnection;
use crate::wake::WakeEvent;

#[derive(Debug, Clone, Copy)]
pub struct AckRequest {
    pub group_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: Option<i64>,
}

#[derive(Debug, Clone, Copy)]
pub struct CursorState {
    pub group_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub last_msg_id: i64,
    /// Whether this ack moved a cursor (and so changed receipts).
    pub moved: bool,
}

/// Why an ack batch was refused; `index` is the position in the request.
#[derive(Debug, Clone, Copy)]
pub enum AckRejection {
    NoGroup {
        index: usize,
        group_id: i64,
    },
    NotMember {
        index: usize,
        group_id: i64,
    },
    BeyondLastMessage {
        index: usize,
        group_id: i64,
        requested: i64,
        last_msg_id: i64,
    },
}

enum TxError {
    Rejected(AckRejection),
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for TxError {
    fn from(e: diesel::result::Error) -> Self {
        TxError::Db(e)
    }
}

/// Applies every ack or none. Each ack writes at most one row however many messages it covers,
/// and an ack that would not move a cursor writes nothing.
pub fn ack(
    conn: &mut AnyConnection,
    user_id: &str,
    acks: &[AckRequest],
    instance: &str,
) -> QueryResult<Result<Vec<CursorState>, AckRejection>> {
    let outcome = conn.transaction::<_, TxError, _>(|conn| {
        acks.iter()
            .enumerate()
            .map(|(index, request)| ack_one(conn, user_id, index, request, instance))
            .collect()
    });
    match outcome {
        Ok(states) => Ok(Ok(states)),
        Err(TxError::Rejected(rejection)) => Ok(Err(rejection)),
        Err(TxError::Db(e)) => Err(e),
    }
}

fn ack_one(
    conn: &mut AnyConnection,
    user_id: &str,
    index: usize,
    request: &AckRequest,
    instance: &str,
) -> Result<CursorState, TxError> {
    let group_id = request.group_id;
    let (group, member) = match access(conn, group_id, user_id)? {
        Access::NoGroup => {
            return Err(TxError::Rejected(AckRejection::NoGroup { index, group_id }))
        }
        Access::NotMember(_) => {
            return Err(TxError::Rejected(AckRejection::NotMember {
                index,
                group_id,
            }))
        }
        Access::Member(group, member) => (group, member),
    };
    // The seeds' ack means read unless told otherwise; reading implies delivery.
    let read_to = request.last_read_msg_id.unwrap_or(request.last_ack_msg_id);
    let ack_to = request.last_ack_msg_id.max(read_to);
    if ack_to > group.last_msg_id {
        return Err(TxError::Rejected(AckRejection::BeyondLastMessage {
            index,
            group_id,
            requested: ack_to,
            last_msg_id: group.last_msg_id,
        }));
    }
    let unchanged = ack_to <= member.last_ack_msg_id && read_to <= member.last_read_msg_id;
    if unchanged {
        return Ok(CursorState {
            group_id,
            last_ack_msg_id: member.last_ack_msg_id,
            last_read_msg_id: member.last_read_msg_id,
            last_msg_id: group.last_msg_id,
            moved: false,
        });
    }
    let (last_ack_msg_id, last_read_msg_id) =
        advance_cursors(conn, group_id, user_id, ack_to, read_to)?;
    // Receipts of messages after the old read cursor, up to the new delivered one, may have
    // changed: one row for the whole range, however many messages it covers.
    record_change(
        conn,
        group_id,
        user_id,
        member.last_read_msg_id,
        last_ack_msg_id,
    )?;
    announce(conn, instance, &WakeEvent::CursorMoved(group_id))?;
    Ok(CursorState {
        group_id,
        last_ack_msg_id,
        last_read_msg_id,
        last_msg_id: group.last_msg_id,
        moved: true,
    })
}
