//! Acks: moving members' cursors forward, one group or many in one transaction.

use diesel::prelude::*;

use super::members::{access, advance_cursors, Access};
use super::AnyConnection;

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
) -> QueryResult<Result<Vec<CursorState>, AckRejection>> {
    let outcome = conn.transaction::<_, TxError, _>(|conn| {
        acks.iter()
            .enumerate()
            .map(|(index, request)| ack_one(conn, user_id, index, request))
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
    let (last_ack_msg_id, last_read_msg_id) = if unchanged {
        (member.last_ack_msg_id, member.last_read_msg_id)
    } else {
        advance_cursors(conn, group_id, user_id, ack_to, read_to)?
    };
    Ok(CursorState {
        group_id,
        last_ack_msg_id,
        last_read_msg_id,
        last_msg_id: group.last_msg_id,
    })
}
