//! Handlers for sending and pulling group messages.

use actix_web::{web, HttpResponse};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::AuthUser;
use super::views::{MessageView, MessagesPage};
use super::{read_as_member, AppState};
use crate::db::access::Membership;
use crate::db::devices::device_ack;
use crate::db::messages::{self, SendOutcome};
use crate::db::receipts::{count_receipts, member_cursors};
use crate::domain::{parse_client_msg_id, parse_content, parse_limit, parse_msg_id};

#[derive(Deserialize)]
pub struct SendMessageBody {
    client_msg_id: String,
    content: String,
}

/// 201 with the new message, or 200 with the original when `client_msg_id` was seen before.
#[tracing::instrument(skip_all, fields(user = %user.user_id, group_id = path.0))]
pub async fn send_message(
    user: AuthUser,
    state: web::Data<AppState>,
    path: web::Path<(i64,)>,
    body: web::Json<SendMessageBody>,
) -> Result<HttpResponse, ApiError> {
    let group_id = path.0;
    let client_msg_id = parse_client_msg_id(&body.client_msg_id)?;
    let content = parse_content(&body.content)?;
    let sender = user.clone();
    let outcome = state
        .db
        .write(move |conn, wakes| {
            messages::send(
                conn,
                group_id,
                sender.id(),
                sender.device.as_ref(),
                &client_msg_id,
                &content,
                wakes,
            )
        })
        .await??;
    match outcome {
        SendOutcome::Created(row) => {
            state.metrics.messages_sent.inc();
            Ok(HttpResponse::Created().json(MessageView::from(row)))
        }
        SendOutcome::Existing(row) => Ok(HttpResponse::Ok().json(MessageView::from(row))),
    }
}

#[derive(Deserialize)]
pub struct ListMessagesQuery {
    after_msg_id: Option<i64>,
    before_msg_id: Option<i64>,
    limit: Option<i64>,
    with_receipts: Option<bool>,
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
    let group_id = path.0;
    let limit = parse_limit(query.limit)?;
    let after = query
        .after_msg_id
        .map(|v| parse_msg_id("after_msg_id", v))
        .transpose()?;
    let before = query
        .before_msg_id
        .map(|v| parse_msg_id("before_msg_id", v))
        .transpose()?;
    if after.is_some() && before.is_some() {
        return Err(ApiError::Validation(
            "give after_msg_id or before_msg_id, not both".into(),
        ));
    }
    let with_receipts = query.with_receipts.unwrap_or(false);
    let device = user.device.clone();
    let (Membership { group, member }, (mut rows, cursors, device_ack)) = read_as_member(
        &state,
        group_id,
        &user,
        move |conn, Membership { member, .. }| {
            // A member never sees messages from before they joined.
            let floor = member.joined_after_msg_id;
            let device_ack = match &device {
                None => member.last_ack_msg_id,
                Some(d) => device_ack(conn, group_id, &member.user_id, d)?.unwrap_or(floor),
            };
            let rows = match before {
                Some(before) => messages::page_before(conn, group_id, before, floor, limit + 1)?,
                None => {
                    let after = after.unwrap_or(device_ack).max(floor);
                    messages::page_after(conn, group_id, after, limit + 1)?
                }
            };
            let cursors = if with_receipts {
                Some(member_cursors(conn, group_id)?)
            } else {
                None
            };
            Ok((rows, cursors, device_ack))
        },
    )
    .await?;
    let has_more = rows.len() as i64 > limit;
    if has_more {
        // Backwards pages drop the oldest extra row, forward pages the newest.
        if before.is_some() {
            rows.remove(0);
        } else {
            rows.truncate(limit as usize);
        }
    }
    let last_msg_id = rows
        .last()
        .map_or(group.last_msg_id, |m| m.msg_id.max(group.last_msg_id));
    let mut messages: Vec<MessageView> = rows.into_iter().map(MessageView::from).collect();
    if let Some(cursors) = cursors {
        // Receipts go on the caller's own messages only.
        for message in messages.iter_mut().filter(|m| m.sender_id == user.id()) {
            message.receipt = Some(count_receipts(&cursors, message.msg_id, user.id()).into());
        }
    }
    Ok(HttpResponse::Ok().json(MessagesPage {
        group_id,
        messages,
        has_more,
        last_msg_id,
        last_ack_msg_id: device_ack,
        last_read_msg_id: member.last_read_msg_id,
    }))
}
