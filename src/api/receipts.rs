//! Handlers for read receipts: one message's readers, and the senders' long-poll of changes.

use crate::domain::entries::EntryKind;
use crate::domain::refusal::Refusal;
use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::longpoll::{long_poll, PollQuery};
use super::views::{MessageReceiptsView, ReceiptChangeView, ReceiptChangesPage, ReceiptCountsView};
use super::{read_as_member, AppState};
use crate::db::group::access::Membership;
use crate::db::message::entry_refs::find_message;
use crate::db::models::MessageRow;
use crate::db::read_models::changes::{changed_receipts, Feed, MessageRef};
use crate::db::read_models::receipt_counts::{message_receipts, receipt_counts};
use crate::db::AnyConnection;
use crate::domain::{parse_limit, GroupId, MsgId, UserId};
use crate::feeds::page::{paginate, read_window, Page};
use crate::feeds::position::FeedPosition;

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
    let group_id = GroupId(group_id);
    let limit = parse_limit(query.limit)?;
    let after = match &query.cursor {
        Some(c) => Some(UserId::parse("cursor", c)?),
        None => None,
    };
    let after_id = after.map(|a| a.as_str().to_owned());
    let (_, found) = read_as_member(&state, group_id, &user, move |conn, membership| {
        let message = match find_message(conn, group_id, MsgId(msg_id))? {
            Some(m) => m,
            None => return Ok(Err(Refusal::NoMessage { group_id, msg_id })),
        };
        if let Err(refusal) = may_see_receipts(membership, &message) {
            return Ok(Err(refusal));
        }
        let sender = message.sender_id.clone();
        let after = after_id.as_deref();
        let (counts, page) =
            message_receipts(conn, group_id, MsgId(msg_id), &sender, after, limit + 1)?;
        Ok(Ok((message, counts, page)))
    })
    .await?;
    let (message, counts, mut page) = found?;
    let has_more = page.len() as i64 > limit;
    page.truncate(limit as usize);
    let next_cursor = has_more
        .then(|| page.last().map(|(user_id, _)| user_id.clone()))
        .flatten();
    let (read, unread): (Vec<_>, Vec<_>) = page.into_iter().partition(|(_, read)| *read);
    Ok(HttpResponse::Ok().json(MessageReceiptsView {
        group_id: group_id.0,
        msg_id,
        sender_id: message.sender_id.clone(),
        counts: counts.into(),
        read_user_ids: read.into_iter().map(|(user_id, _)| user_id).collect(),
        unread_user_ids: unread.into_iter().map(|(user_id, _)| user_id).collect(),
        has_more,
        next_cursor,
    }))
}

/// Whether `member` may see the receipts of `message`: a message of the group from after
/// they joined (others are not theirs to see at all), sent by them unless they own the group,
/// and a message, not a change entry or a system line.
fn may_see_receipts(member: &Membership, message: &MessageRow) -> Result<(), Refusal> {
    let (group_id, msg_id) = (GroupId(message.group_id), message.msg_id);
    if msg_id <= member.member.joined_after_msg_id {
        return Err(Refusal::NoMessage { group_id, msg_id });
    }
    if message.sender_id != member.member.user_id && !member.member.is_owner() {
        return Err(Refusal::ReceiptsOfOthers);
    }
    if message.kind != EntryKind::Message {
        let kind = message.kind;
        return Err(Refusal::NoReceipts { msg_id, kind });
    }
    Ok(())
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
    let (window, refs) = read_window(conn, cursor, |conn, end, after| {
        changed_receipts(conn, sender_id, cursor.seen, end, after, limit + 1)
    })?;
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

/// Current counts for the given messages of `sender_id`: a few statements per group, however
/// many of its messages the page holds.
fn current_counts(
    conn: &mut AnyConnection,
    sender_id: &str,
    refs: &[MessageRef],
) -> diesel::QueryResult<Vec<ReceiptChangeView>> {
    let mut views = Vec::with_capacity(refs.len());
    for same_group in refs.chunk_by(|a, b| a.group_id == b.group_id) {
        let group_id = same_group[0].group_id;
        let msg_ids: Vec<MsgId> = same_group.iter().map(|r| MsgId(r.msg_id)).collect();
        let counts = receipt_counts(conn, GroupId(group_id), sender_id, &msg_ids)?;
        views.extend(
            same_group
                .iter()
                .zip(counts)
                .map(|(r, counts)| ReceiptChangeView {
                    group_id: r.group_id,
                    msg_id: r.msg_id,
                    counts: ReceiptCountsView::from(counts),
                }),
        );
    }
    Ok(views)
}
