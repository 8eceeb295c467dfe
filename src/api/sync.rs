//! Handler for the members' long-poll: which of my groups changed, on any of my devices.

use actix_web::{web, HttpResponse};

use super::error::ApiError;
use super::extract::AuthUser;
use super::longpoll::{long_poll, PollQuery};
use super::views::{MyGroupView, SyncPage};
use super::AppState;
use crate::db::group::member_events::device_column;
use crate::db::read_models::changes::{changed_groups, Feed, MessageRef};
use crate::db::read_models::chat_list::{chat_list_rows, total_unread};
use crate::db::AnyConnection;
use crate::feeds::page::{paginate, read_window, Page};
use crate::feeds::position::FeedPosition;

/// What one read of the sync feed found.
pub struct SyncChanges {
    groups: Vec<MyGroupView>,
    removed_group_ids: Vec<i64>,
    total_unread: i64,
}

/// Long-poll: the caller's groups with messages committed after the cursor, or whose state
/// the caller changed on another device (read there, joined, left), with their current
/// cursors and unread counts, so the client pulls them with the messages endpoint.
#[tracing::instrument(skip_all, fields(user = %user.user_id))]
pub async fn poll_sync(
    user: AuthUser,
    state: web::Data<AppState>,
    query: web::Query<PollQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = long_poll(&state, &user, Feed::Messages, &query, fetch_changed_groups).await?;
    let (groups, removed_group_ids, total_unread) = match page.items.into_iter().next() {
        Some(c) => (c.groups, c.removed_group_ids, c.total_unread),
        None => {
            let caller = user.clone();
            let total = state
                .db
                .read(move |conn| total_unread(conn, caller.id()))
                .await?;
            (Vec::new(), Vec::new(), total)
        }
    };
    Ok(HttpResponse::Ok().json(SyncPage {
        groups,
        removed_group_ids,
        total_unread,
        cursor: page.next.encode(&state.cursors),
        has_more: page.has_more,
    }))
}

/// One page of changed groups, as one item (empty when nothing changed).
fn fetch_changed_groups(
    conn: &mut AnyConnection,
    caller: &AuthUser,
    cursor: &FeedPosition,
    limit: i64,
) -> diesel::QueryResult<Page<SyncChanges>> {
    let device = device_column(caller.device.as_ref());
    let (window, refs) = read_window(conn, cursor, |conn, end, after| {
        changed_groups(
            conn,
            caller.id(),
            device,
            cursor.seen,
            end,
            after.group_id,
            limit + 1,
        )
    })?;
    let Page {
        items: refs,
        next,
        has_more,
    } = paginate(cursor, window, refs, limit, |r| MessageRef {
        group_id: r.group_id,
        msg_id: 0,
    });
    if refs.is_empty() {
        return Ok(Page {
            items: Vec::new(),
            next,
            has_more,
        });
    }
    let ids: Vec<i64> = refs.iter().map(|r| r.group_id).collect();
    let named = caller.device.is_some();
    let groups: Vec<MyGroupView> = chat_list_rows(conn, caller.id(), device, &ids)?
        .into_iter()
        .map(|row| MyGroupView::new(row, named))
        .collect();
    // A changed group the caller no longer belongs to is one they left or were removed from.
    let removed_group_ids = ids
        .into_iter()
        .filter(|id| !groups.iter().any(|g| g.group_id == *id))
        .collect();
    let changes = SyncChanges {
        groups,
        removed_group_ids,
        total_unread: total_unread(conn, caller.id())?,
    };
    Ok(Page {
        items: vec![changes],
        next,
        has_more,
    })
}
