//! The notification body Chorus POSTs to the push service (documented in openapi.yaml as
//! `PushNotification`), and its signature.

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Characters of a message a notification carries when content is on: enough for a lock
/// screen line.
pub const PREVIEW_CHARS: usize = 100;

/// The header carrying the signature: `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "x-chorus-signature";
/// The header carrying the notification's idempotency key (also `notification_id`).
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// Why a notification was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NotificationKind {
    /// At least one group has messages the device has not received.
    NewMessages,
    /// Only unread counts went down (read on another device): the phone updates its badge.
    BadgeUpdate,
}

#[derive(Debug, Clone, Serialize)]
pub struct Notification {
    /// The idempotency key: every attempt at this notification carries the same.
    pub notification_id: String,
    pub kind: NotificationKind,
    pub created_at: DateTime<Utc>,
    pub user_id: String,
    pub device_id: String,
    pub platform: String,
    pub token: String,
    /// The user's unread messages over all their groups: the number for the app icon.
    pub badge: i64,
    pub groups: Vec<NotifiedGroup>,
}

#[derive(Debug, Clone, Serialize)]
pub struct NotifiedGroup {
    pub group_id: i64,
    pub unread_count: i64,
    pub last_msg_id: i64,
    /// False when the group is here only because its unread count went down.
    pub new_messages: bool,
    /// Only with `CHORUS_PUSH_CONTENT=true`, for groups with new messages.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_message: Option<MessagePreview>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MessagePreview {
    pub sender_id: String,
    /// The first characters of the message.
    pub text: String,
}

impl MessagePreview {
    pub fn new(sender_id: String, content: &str) -> Self {
        MessagePreview {
            sender_id,
            text: content.chars().take(PREVIEW_CHARS).collect(),
        }
    }
}

/// The value of [`SIGNATURE_HEADER`] for `body`.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    use std::fmt::Write;
    let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(secret)
        .expect("HMAC accepts keys of any length");
    mac.update(body);
    let digest = mac.finalize().into_bytes();
    let mut hex = String::with_capacity(7 + digest.len() * 2);
    hex.push_str("sha256=");
    for byte in digest {
        let _ = write!(hex, "{byte:02x}");
    }
    hex
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_is_the_hex_hmac_sha256_of_the_body() {
        // RFC 4231, test case 2.
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_preview_keeps_the_first_characters_whole() {
        let long = "é".repeat(PREVIEW_CHARS + 5);
        let preview = MessagePreview::new("alice".into(), &long);
        assert_eq!(preview.text.chars().count(), PREVIEW_CHARS);
    }
}
