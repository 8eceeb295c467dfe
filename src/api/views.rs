//! Response bodies: the JSON shapes clients see, built from rows. Field names match openapi.yaml.

use chrono::{DateTime, NaiveDateTime, Utc};
use serde::Serialize;
use serde_json::value::RawValue;

use crate::db::acks::cursors::CursorState;
use crate::db::device::devices::DeviceRow;
use crate::db::device::push_targets::PushTargetView;
use crate::db::message::entry_refs::EntryRefs;
use crate::db::models::{GroupRow, MemberRow, MessageRow};
use crate::db::read_models::chat_list::{ChatListRow, LastMessage};
use crate::db::read_models::receipt_counts::ReceiptCounts;
use crate::domain::PREVIEW_CHARS;

fn utc(t: NaiveDateTime) -> DateTime<Utc> {
    DateTime::from_naive_utc_and_offset(t, Utc)
}

#[derive(Serialize)]
pub struct GroupView {
    pub group_id: i64,
    pub name: String,
    pub owner_id: String,
    pub last_msg_id: i64,
    pub member_count: i64,
    pub created_at: DateTime<Utc>,
}

impl From<GroupRow> for GroupView {
    fn from(group: GroupRow) -> Self {
        GroupView {
            group_id: group.group_id,
            name: group.name,
            owner_id: group.owner_id,
            last_msg_id: group.last_msg_id,
            member_count: group.member_count,
            created_at: utc(group.created_at),
        }
    }
}

#[derive(Serialize)]
pub struct MemberView {
    pub user_id: String,
    pub role: &'static str,
    pub joined_at: DateTime<Utc>,
}

impl From<MemberRow> for MemberView {
    fn from(m: MemberRow) -> Self {
        MemberView {
            user_id: m.user_id,
            role: m.role.as_str(),
            joined_at: utc(m.joined_at),
        }
    }
}

#[derive(Serialize)]
pub struct MembersPage {
    pub members: Vec<MemberView>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
pub struct AddedMembers {
    pub added: Vec<String>,
}

/// An entry of a group's log as a member sees it. Fields that do not apply to its kind are
/// left out.
#[derive(Serialize)]
pub struct MessageView {
    pub group_id: i64,
    pub msg_id: i64,
    pub kind: &'static str,
    pub sender_id: String,
    pub client_msg_id: String,
    pub content: String,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retracted_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_msg_id: Option<i64>,
    /// The changed message as it is now, when the caller may see it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<TargetView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to_msg_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<QuoteView>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mentions: Vec<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub mention_all: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ext: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<RawValue>>,
    /// Only with `with_receipts=true`, and only on the caller's own messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub receipt: Option<ReceiptCountsView>,
}

/// Stored JSON (written by the client and checked, or by the server) as it was written.
fn raw_json(stored: Option<String>) -> Option<Box<RawValue>> {
    stored.and_then(|text| RawValue::from_string(text).ok())
}

impl MessageView {
    /// `row` as a member who joined after `joined_after_msg_id` sees it, with what it points
    /// at from `refs`.
    pub fn new(row: MessageRow, refs: &EntryRefs, joined_after_msg_id: i64) -> Self {
        let target = refs
            .visible(row.target_msg_id, joined_after_msg_id)
            .map(TargetView::from);
        let reply_to = refs
            .visible(row.reply_to_msg_id, joined_after_msg_id)
            .map(QuoteView::from);
        MessageView {
            group_id: row.group_id,
            msg_id: row.msg_id,
            kind: row.kind.as_str(),
            mentions: refs.mentions.get(&row.msg_id).cloned().unwrap_or_default(),
            sender_id: row.sender_id,
            client_msg_id: row.client_msg_id,
            content: row.content,
            created_at: utc(row.created_at),
            edited_at: row.edited_at.map(utc),
            retracted_at: row.retracted_at.map(utc),
            target_msg_id: row.target_msg_id,
            target,
            reply_to_msg_id: row.reply_to_msg_id,
            reply_to,
            mention_all: row.mention_all,
            ext: raw_json(row.ext),
            detail: raw_json(row.detail),
            receipt: None,
        }
    }
}

/// The message a change entry changed, as it is now: the edited text, or recalled or deleted.
#[derive(Serialize)]
pub struct TargetView {
    pub msg_id: i64,
    pub kind: &'static str,
    pub sender_id: String,
    pub content: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retracted_at: Option<DateTime<Utc>>,
}

impl From<&MessageRow> for TargetView {
    fn from(m: &MessageRow) -> Self {
        TargetView {
            msg_id: m.msg_id,
            kind: m.kind.as_str(),
            sender_id: m.sender_id.clone(),
            content: m.content.clone(),
            edited_at: m.edited_at.map(utc),
            retracted_at: m.retracted_at.map(utc),
        }
    }
}

/// The message a reply quotes, as it is now, shortened to a preview.
#[derive(Serialize)]
pub struct QuoteView {
    pub msg_id: i64,
    pub kind: &'static str,
    pub sender_id: String,
    pub preview: String,
    pub truncated: bool,
}

impl From<&MessageRow> for QuoteView {
    fn from(m: &MessageRow) -> Self {
        let (preview, truncated) = preview_of(&m.content);
        QuoteView {
            msg_id: m.msg_id,
            kind: m.kind.as_str(),
            sender_id: m.sender_id.clone(),
            preview,
            truncated,
        }
    }
}

/// The first characters of a text, and whether it goes on past them.
fn preview_of(text: &str) -> (String, bool) {
    let truncated = text.chars().count() > PREVIEW_CHARS;
    (text.chars().take(PREVIEW_CHARS).collect(), truncated)
}

#[derive(Serialize)]
pub struct MessagesPage {
    pub group_id: i64,
    pub messages: Vec<MessageView>,
    pub has_more: bool,
    pub last_msg_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
}

#[derive(Serialize)]
pub struct CursorsView {
    pub group_id: i64,
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub last_msg_id: i64,
    pub unread_count: i64,
    pub unread_mention_count: i64,
}

impl From<CursorState> for CursorsView {
    fn from(c: CursorState) -> Self {
        CursorsView {
            group_id: c.group_id,
            last_ack_msg_id: c.last_ack_msg_id,
            last_read_msg_id: c.last_read_msg_id,
            last_msg_id: c.last_msg_id,
            unread_count: c.unread().unread_count(),
            unread_mention_count: c.unread_mention_count,
        }
    }
}

#[derive(Serialize)]
pub struct AcksView {
    pub results: Vec<CursorsView>,
}

#[derive(Serialize)]
pub struct MyGroupView {
    pub group_id: i64,
    pub name: String,
    pub last_msg_id: i64,
    /// The calling device's delivered cursor.
    pub last_ack_msg_id: i64,
    pub last_read_msg_id: i64,
    pub unread_count: i64,
    /// Unread messages that mention the caller by name or mention everyone.
    pub unread_mention_count: i64,
    pub last_activity_at: DateTime<Utc>,
    /// Absent when the group has no message the caller may see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message: Option<LastMessageView>,
}

impl MyGroupView {
    /// The row as the calling device sees it (`named_device`: not the default device).
    pub fn new(row: ChatListRow, named_device: bool) -> Self {
        MyGroupView {
            group_id: row.group_id,
            last_ack_msg_id: row.device_ack(named_device),
            unread_count: row.unread().unread_count(),
            unread_mention_count: row.unread_mention_count,
            name: row.name,
            last_msg_id: row.last_msg_id,
            last_read_msg_id: row.last_read_msg_id,
            last_activity_at: utc(row.last_activity_at),
            last_message: row.last_message.map(LastMessageView::from),
        }
    }
}

#[derive(Serialize)]
pub struct LastMessageView {
    pub msg_id: i64,
    pub kind: &'static str,
    pub sender_id: String,
    pub created_at: DateTime<Utc>,
    /// The first characters of the content.
    pub preview: String,
    /// Whether the content goes on past the preview.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<Box<RawValue>>,
}

impl From<LastMessage> for LastMessageView {
    fn from(m: LastMessage) -> Self {
        let (preview, truncated) = preview_of(&m.content_start);
        LastMessageView {
            msg_id: m.msg_id,
            kind: m.kind.as_str(),
            sender_id: m.sender_id,
            created_at: utc(m.created_at),
            preview,
            truncated,
            detail: raw_json(m.detail),
        }
    }
}

#[derive(Serialize)]
pub struct MyGroupsPage {
    pub groups: Vec<MyGroupView>,
    /// Unread messages over all the caller's groups, not only this page.
    pub total_unread: i64,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
pub struct DeviceView {
    pub device_id: String,
    pub created_at: DateTime<Utc>,
    /// Refreshed at most every 15 minutes.
    pub last_seen_at: DateTime<Utc>,
    /// Whether the request came from this device.
    pub current: bool,
}

impl DeviceView {
    pub fn new(row: DeviceRow, current: Option<&str>) -> Self {
        DeviceView {
            current: current == Some(row.device_id.as_str()),
            device_id: row.device_id,
            created_at: utc(row.created_at),
            last_seen_at: utc(row.last_seen_at),
        }
    }
}

/// A device's push target as its owner sees it: never the token itself.
#[derive(Serialize)]
pub struct PushTargetResponse {
    pub device_id: String,
    pub platform: String,
    pub registered_at: DateTime<Utc>,
}

impl PushTargetResponse {
    pub fn new(view: PushTargetView) -> Self {
        PushTargetResponse {
            device_id: view.device_id,
            platform: view.platform,
            registered_at: utc(view.registered_at),
        }
    }
}

#[derive(Serialize)]
pub struct DevicesPage {
    pub devices: Vec<DeviceView>,
}

#[derive(Serialize, Debug, Clone, Copy)]
pub struct ReceiptCountsView {
    pub read_count: i64,
    pub unread_count: i64,
    pub delivered_count: i64,
}

impl From<ReceiptCounts> for ReceiptCountsView {
    fn from(c: ReceiptCounts) -> Self {
        ReceiptCountsView {
            read_count: c.read_count,
            unread_count: c.unread_count,
            delivered_count: c.delivered_count,
        }
    }
}

#[derive(Serialize)]
pub struct MessageReceiptsView {
    pub group_id: i64,
    pub msg_id: i64,
    pub sender_id: String,
    #[serde(flatten)]
    pub counts: ReceiptCountsView,
    pub read_user_ids: Vec<String>,
    pub unread_user_ids: Vec<String>,
    pub has_more: bool,
    pub next_cursor: Option<String>,
}

#[derive(Serialize)]
pub struct ReceiptChangeView {
    pub group_id: i64,
    pub msg_id: i64,
    #[serde(flatten)]
    pub counts: ReceiptCountsView,
}

#[derive(Serialize)]
pub struct ReceiptChangesPage {
    pub changes: Vec<ReceiptChangeView>,
    pub cursor: String,
    pub has_more: bool,
}

#[derive(Serialize)]
pub struct SyncPage {
    /// Groups with new messages, read elsewhere, or newly joined: their current state.
    pub groups: Vec<MyGroupView>,
    /// Groups the caller left or was removed from.
    pub removed_group_ids: Vec<i64>,
    /// Unread messages over all the caller's groups now.
    pub total_unread: i64,
    pub cursor: String,
    pub has_more: bool,
}
