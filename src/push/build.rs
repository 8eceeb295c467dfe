//! Building a device's next notification, in the one transaction that also records what it
//! tells (`push_group_state`) and stores it as the device's pending notification: a crash
//! before the commit leaves the device due as before, one after it leaves the notification
//! stored for delivery. Either way nothing due is lost.

use chrono::NaiveDateTime;
use diesel::QueryResult;

use super::payload::{MessagePreview, Notification, NotificationKind, NotifiedGroup};
use crate::db::push::push_due::{
    due_groups, last_message_from_others, mark_told, Cutoffs, DueGroup,
};
use crate::db::push::push_outbox::{lock_for_build, store_pending, BuildTarget, Lease, Pending};
use crate::db::read_models::chat_list::total_unread;
use crate::db::AnyConnection;
use crate::domain::GroupId;

/// What a build needs to know besides the device.
#[derive(Debug, Clone)]
pub struct BuildContext {
    pub cutoffs: Cutoffs,
    pub now: NaiveDateTime,
    /// Held by the builder, which delivers at once.
    pub lease: Lease,
    /// Whether notifications carry message content.
    pub content: bool,
}

/// Builds and stores the device's next notification if it is due one; None when it is not
/// (any more: it acked meanwhile), or another instance is building or delivering one.
pub fn build_notification(
    conn: &mut AnyConnection,
    device_id: &str,
    ctx: &BuildContext,
) -> QueryResult<Option<Pending>> {
    let Some(target) = lock_for_build(conn, device_id, ctx.cutoffs.interval)? else {
        return Ok(None);
    };
    let due = due_groups(conn, device_id, &target.user_id, ctx.cutoffs.grace)?;
    if due.is_empty() {
        return Ok(None);
    }
    let notification = Notification {
        notification_id: notification_id(&target),
        kind: if due.iter().any(|g| g.has_new == 1) {
            NotificationKind::NewMessages
        } else {
            NotificationKind::BadgeUpdate
        },
        created_at: ctx.now.and_utc(),
        badge: total_unread(conn, &target.user_id)?,
        groups: notified_groups(conn, &due, &target.user_id, ctx.content)?,
        user_id: target.user_id.clone(),
        device_id: device_id.to_owned(),
        platform: target.platform.clone(),
        token: target.token.clone(),
    };
    let body = serde_json::to_string(&notification)
        .map_err(|e| diesel::result::Error::SerializationError(Box::new(e)))?;
    mark_told(conn, device_id, &target.user_id, &due)?;
    let pending = pending_of(&target, notification.notification_id, body, ctx.now);
    store_pending(conn, &pending, &ctx.lease)?;
    Ok(Some(pending))
}

/// A key no other notification has: the device, when its target was registered (a target
/// removed and registered again counts from 1 again) and the notification's number.
fn notification_id(target: &BuildTarget) -> String {
    let registered = target.registered_at.and_utc().timestamp_micros();
    format!(
        "{}:{registered}:{}",
        target.device_id,
        target.built_count + 1
    )
}

fn pending_of(target: &BuildTarget, key: String, body: String, now: NaiveDateTime) -> Pending {
    Pending {
        device_id: target.device_id.clone(),
        key,
        body,
        since: now,
        attempts: 0,
    }
}

/// The groups as the notification shows them, with their last message when content is on.
fn notified_groups(
    conn: &mut AnyConnection,
    due: &[DueGroup],
    user_id: &str,
    content: bool,
) -> QueryResult<Vec<NotifiedGroup>> {
    let mut groups = Vec::with_capacity(due.len());
    for group in due {
        let new_messages = group.has_new == 1;
        let last_message = if content && new_messages {
            last_message_from_others(conn, GroupId(group.group_id), user_id)?
                .map(|(sender_id, text)| MessagePreview::new(sender_id, &text))
        } else {
            None
        };
        groups.push(NotifiedGroup {
            group_id: group.group_id,
            unread_count: group.unread_count,
            last_msg_id: group.last_msg_id,
            new_messages,
            last_message,
        });
    }
    Ok(groups)
}
