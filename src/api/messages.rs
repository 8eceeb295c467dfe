//! Handlers for sending and pulling group messages.

use crate::domain::entries::EntryKind;
use std::collections::HashMap;

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::json_body::JsonBody;
use super::message_body::SendMessageBody;
use super::views::{MessageView, MessagesPage};
use super::{read_as_member, AppState};
use crate::db::device::devices::device_ack;
use crate::db::group::access::Membership;
use crate::db::message::entry_refs::{load_refs, EntryRefs};
use crate::db::message::messages::{self, NewEntry, SendOutcome};
use crate::db::models::{MemberRow, MessageRow};
use crate::db::read_models::receipt_counts::{receipt_counts, ReceiptCounts};
use crate::db::AnyConnection;
use crate::domain::{parse_limit, parse_msg_id};
use crate::domain::{DeviceId, GroupId, MsgId};

/// 201 with the new entry, or 200 with the original when `client_msg_id` was seen before.
#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn send_message(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: JsonBody<SendMessageBody>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let (client_msg_id, entry) = body.parse()?;
    let entry = NewEntry {
        sender_id: user.id().to_owned(),
        device: user.device.clone(),
        client_msg_id,
        entry,
    };
    let (outcome, refs) = state
        .shared_sends
        .send(group_id, entry, state.change_windows)
        .await??;
    match outcome {
        SendOutcome::Created(row) => {
            state.metrics.messages_sent.inc();
            Ok(HttpResponse::Created().json(MessageView::new(row, &refs, 0)))
        }
        SendOutcome::Existing(row) => Ok(HttpResponse::Ok().json(MessageView::new(row, &refs, 0))),
    }
}

#[derive(Deserialize)]
pub struct ListMessagesQuery {
    after_msg_id: Option<i64>,
    before_msg_id: Option<i64>,
    limit: Option<i64>,
    with_receipts: Option<bool>,
}

/// Where a page of messages starts.
#[derive(Debug, Clone, Copy)]
enum PageStart {
    /// After this message, ascending; None: after the calling device's delivered cursor.
    After(Option<i64>),
    /// Before this message: the newest ones below it (history), returned ascending.
    Before(i64),
    /// After the first message and below the second, ascending: a gap between two pages.
    Between(i64, i64),
}

impl ListMessagesQuery {
    fn start(&self) -> Result<PageStart, ApiError> {
        let after = self
            .after_msg_id
            .map(|v| parse_msg_id("after_msg_id", v))
            .transpose()?;
        let before = self
            .before_msg_id
            .map(|v| parse_msg_id("before_msg_id", v))
            .transpose()?;
        Ok(match (after, before) {
            (Some(after), Some(before)) => PageStart::Between(after, before),
            (None, Some(before)) => PageStart::Before(before),
            (after, None) => PageStart::After(after),
        })
    }
}

/// What one read of a group's messages found.
struct Pulled {
    rows: Vec<MessageRow>,
    refs: EntryRefs,
    /// The receipt counts of the caller's own messages on the page, when asked for.
    receipts: HashMap<i64, ReceiptCounts>,
    device_ack: i64,
}

/// Reads up to `limit + 1` messages from `start` for `member`, never from before they joined.
fn pull(
    conn: &mut AnyConnection,
    member: &MemberRow,
    device: Option<&DeviceId>,
    start: PageStart,
    limit: i64,
    with_receipts: bool,
) -> diesel::QueryResult<Pulled> {
    let (group_id, floor) = (member.group_id, member.joined_after_msg_id);
    let device_ack = match device {
        None => member.last_ack_msg_id,
        Some(d) => device_ack(conn, GroupId(group_id), &member.user_id, d)?.unwrap_or(floor),
    };
    let rows = match start {
        PageStart::Before(before) => messages::page_before(
            conn,
            GroupId(group_id),
            MsgId(before),
            MsgId(floor),
            limit + 1,
        )?,
        PageStart::After(after) => {
            let after = after.unwrap_or(device_ack).max(floor);
            let below = MsgId(i64::MAX);
            messages::page_after(conn, GroupId(group_id), MsgId(after), below, limit + 1)?
        }
        PageStart::Between(after, before) => {
            let after = MsgId(after.max(floor));
            messages::page_after(conn, GroupId(group_id), after, MsgId(before), limit + 1)?
        }
    };
    let receipts = if with_receipts {
        // Only the caller's own messages carry receipts: other entries have none.
        let own: Vec<MsgId> = (rows.iter())
            .filter(|m| m.sender_id == member.user_id && m.kind == EntryKind::Message)
            .map(|m| MsgId(m.msg_id))
            .collect();
        let counts = receipt_counts(conn, GroupId(group_id), &member.user_id, &own)?;
        own.iter().map(|m| m.0).zip(counts).collect()
    } else {
        HashMap::new()
    };
    Ok(Pulled {
        refs: load_refs(conn, GroupId(group_id), &rows)?,
        rows,
        receipts,
        device_ack,
    })
}

/// A page of messages, ascending. With neither bound it starts after the calling device's
/// delivered cursor: the offline pull. A member never sees messages from before they joined.
#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn list_messages(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    query: web::Query<ListMessagesQuery>,
) -> Result<HttpResponse, ApiError> {
    let group_id = GroupId(path.0);
    let limit = parse_limit(query.limit)?;
    let start = query.start()?;
    let with_receipts = query.with_receipts.unwrap_or(false);
    let device = user.device.clone();
    let (Membership { group, member }, mut pulled) =
        read_as_member(&state, group_id, &user, move |conn, membership| {
            pull(
                conn,
                &membership.member,
                device.as_ref(),
                start,
                limit,
                with_receipts,
            )
        })
        .await?;
    let has_more = pulled.rows.len() as i64 > limit;
    if has_more {
        // Backwards pages drop the oldest extra row, forward pages the newest.
        match start {
            PageStart::Before(_) => drop(pulled.rows.remove(0)),
            PageStart::After(_) | PageStart::Between(..) => pulled.rows.truncate(limit as usize),
        }
    }
    let last_msg_id = pulled
        .rows
        .last()
        .map_or(group.last_msg_id, |m| m.msg_id.max(group.last_msg_id));
    let floor = member.joined_after_msg_id;
    let mut messages: Vec<MessageView> = (pulled.rows.into_iter())
        .map(|row| MessageView::new(row, &pulled.refs, floor))
        .collect();
    for message in &mut messages {
        if let Some(counts) = pulled.receipts.get(&message.msg_id) {
            message.receipt = Some((*counts).into());
        }
    }
    Ok(HttpResponse::Ok().json(MessagesPage {
        group_id: group_id.0,
        messages,
        has_more,
        last_msg_id,
        last_ack_msg_id: pulled.device_ack,
        last_read_msg_id: member.last_read_msg_id,
    }))
}
