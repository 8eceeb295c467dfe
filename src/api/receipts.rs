//! Handlers for read receipts: one message's readers, and the senders' long-poll of changes.

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::longpoll::{long_poll, paginate, window_of, FeedPosition, Page, PollQuery};
use super::views::{MessageReceiptsView, ReceiptChangeView, ReceiptChangesPage, ReceiptCountsView};
use super::{read_as_member, AppState};
use crate::db::access::Refusal;
use crate::db::changes::{changed_receipts, Feed, MessageRef};
use crate::db::messages::find_message;
use crate::db::models::EntryKind;
use crate::db::receipts::{count_receipts, member_cursors, MemberCursors};
use crate::db::AnyConnection;
use crate::domain::{parse_limit, GroupId, MsgId, UserId};

#[derive(Deserialize)]
pub struct ReceiptsQuery {
    cursor: Option<String>,
    limit: Option<i64>,
}

/// Who has read one message and who has not. Only its sender and the group owner may ask.
#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0, msg_id = path.1))]
pub async fn get_message_receipts(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64, i64)>,
    query: web::Query<ReceiptsQuery>,
) -> Result<HttpResponse, ApiError> {
    let (group_id, msg_id) = path.into_inner();
    let limit = parse_limit(query.limit)?;
    let after = match &query.cursor {
        Some(c) => Some(UserId::parse("cursor", c)?),
        None => None,
    };
    let (membership, (message, members)) =
        read_as_member(&state, group_id, &user, move |conn, _| {
            let message = find_message(conn, GroupId(group_id), MsgId(msg_id))?;
            Ok((message, member_cursors(conn, group_id)?))
        })
        .await?;
    // A message from before the caller joined is not theirs to see.
    let message = message
        .filter(|m| m.msg_id > membership.member.joined_after_msg_id)
        .ok_or(Refusal::NoMessage { group_id, msg_id })?;
    if message.sender_id != user.id() && !membership.member.is_owner() {
        return Err(Refusal::ReceiptsOfOthers.into());
    }
    if message.kind != EntryKind::Message {
        let kind = message.kind;
        return Err(Refusal::NoReceipts { msg_id, kind }.into());
    }
    let counts = count_receipts(&members, msg_id, &message.sender_id);
    let mut audience = members
        .iter()
        .filter(|m| m.receives(msg_id, &message.sender_id))
        .filter(|m| {
            after
                .as_ref()
                .is_none_or(|a| m.user_id.as_str() > a.as_str())
        });
    let page: Vec<_> = audience.by_ref().take(limit as usize).collect();
    let has_more = audience.next().is_some();
    let (read, unread): (Vec<&MemberCursors>, Vec<&MemberCursors>) =
        page.iter().copied().partition(|m| m.has_read(msg_id));
    Ok(HttpResponse::Ok().json(MessageReceiptsView {
        group_id,
        msg_id,
        sender_id: message.sender_id.clone(),
        counts: counts.into(),
        read_user_ids: read.iter().map(|m| m.user_id.clone()).collect(),
        unread_user_ids: unread.iter().map(|m| m.user_id.clone()).collect(),
        has_more,
        next_cursor: has_more
            .then(|| page.last().map(|m| m.user_id.clone()))
            .flatten(),
    }))
}

/// Long-poll: receipt changes of messages the caller sent.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn poll_receipts(
    user: AuthUser,
    state: web::Data<AppState>,
    query: web::Query<PollQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = long_poll(&state, &user, Feed::Receipts, &query, fetch_receipt_changes).await?;
    Ok(HttpResponse::Ok().json(ReceiptChangesPage {
        changes: page.items,
        cursor: page.next.encode(&state.cursors),
        has_more: page.has_more,
    }))
}

fn fetch_receipt_changes(
    conn: &mut AnyConnection,
    caller: &AuthUser,
    cursor: &FeedPosition,
    limit: i64,
) -> diesel::QueryResult<Page<ReceiptChangeView>> {
    let sender_id = caller.id();
    let window = window_of(conn, cursor)?;
    let refs = changed_receipts(
        conn,
        sender_id,
        &cursor.seen,
        &window.upto,
        window.after,
        limit + 1,
    )?;
    let Page {
        items: refs,
        next,
        has_more,
    } = paginate(cursor, window, refs, limit, |r| *r);
    let items = current_counts(conn, sender_id, &refs)?;
    Ok(Page {
        items,
        next,
        has_more,
    })
}

/// Current counts for the given messages of `sender_id`; one member query per group.
fn current_counts(
    conn: &mut AnyConnection,
    sender_id: &str,
    refs: &[MessageRef],
) -> diesel::QueryResult<Vec<ReceiptChangeView>> {
    let mut views = Vec::with_capacity(refs.len());
    for same_group in refs.chunk_by(|a, b| a.group_id == b.group_id) {
        let members = member_cursors(conn, same_group[0].group_id)?;
        views.extend(same_group.iter().map(|r| ReceiptChangeView {
            group_id: r.group_id,
            msg_id: r.msg_id,
            counts: ReceiptCountsView::from(count_receipts(&members, r.msg_id, sender_id)),
        }));
    }
    Ok(views)
}
