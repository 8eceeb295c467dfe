//! Handler for the members' long-poll: which of my groups received messages.

use actix_web::{web, HttpResponse};

use super::error::ApiError;
use super::extract::AuthUser;
use super::longpoll::{long_poll, paginate, window_of, FeedCursor, Page, PollQuery};
use super::views::{MyGroupView, SyncPage};
use super::AppState;
use crate::db::changes::{changed_groups, Feed, MessageRef};
use crate::db::members::my_groups_by_id;
use crate::db::AnyConnection;

/// Long-poll: the caller's groups with messages committed after the cursor, with their
/// `last_msg_id` and unread count, so the client pulls them with the messages endpoint.
#[tracing::instrument(skip_all, fields(user = %user.0))]
pub async fn poll_sync(
    user: AuthUser,
    state: web::Data<AppState>,
    query: web::Query<PollQuery>,
) -> Result<HttpResponse, ApiError> {
    let page = long_poll(&state, &user, Feed::Messages, &query, fetch_changed_groups).await?;
    Ok(HttpResponse::Ok().json(SyncPage {
        groups: page.items,
        cursor: page.next.encode(&state.cursors),
        has_more: page.has_more,
    }))
}

fn fetch_changed_groups(
    conn: &mut AnyConnection,
    user_id: &str,
    cursor: &FeedCursor,
    limit: i64,
) -> diesel::QueryResult<Page<MyGroupView>> {
    let (upto, upto_at, after) = window_of(conn, cursor)?;
    let refs = changed_groups(
        conn,
        user_id,
        &cursor.seen,
        &upto,
        after.group_id,
        limit + 1,
    )?;
    let (refs, next, has_more) = paginate(cursor, (upto, upto_at), refs, limit, |r| MessageRef {
        group_id: r.group_id,
        msg_id: 0,
    });
    let ids: Vec<i64> = refs.iter().map(|r| r.group_id).collect();
    let items = my_groups_by_id(conn, user_id, &ids)?
        .into_iter()
        .map(MyGroupView::from)
        .collect();
    Ok(Page {
        items,
        next,
        has_more,
    })
}
