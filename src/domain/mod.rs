//! The domain: validated inputs and ids, the kinds of a group log's entries and of members
//! ([`entries`]), and why a request may be refused ([`refusal`]). Handlers parse raw request
//! fields into these types at the boundary; the rest of the code trusts them. Every bound here
//! is documented in README and openapi.yaml. No diesel and no actix here: the database layer
//! binds these types to SQL (`db::engine::sql_types`), the API turns refusals into answers.

use std::fmt;

pub mod entries;
pub mod refusal;

pub const MAX_USER_ID_LEN: usize = 64;
pub const MAX_CLIENT_MSG_ID_LEN: usize = 128;
pub const MAX_CONTENT_BYTES: usize = 16 * 1024;
pub const MAX_GROUP_NAME_CHARS: usize = 200;
pub const MAX_IDS_PER_REQUEST: usize = 1000;
pub const MAX_ACKS_PER_REQUEST: usize = 500;
pub const DEFAULT_PAGE_LIMIT: i64 = 50;
pub const MAX_PAGE_LIMIT: i64 = 200;
pub const MAX_REQUEST_BODY_BYTES: usize = 64 * 1024;
/// Characters of a group's last message shown in the chat list.
pub const PREVIEW_CHARS: usize = 120;
/// Members one message may mention by name.
pub const MAX_MENTIONS: usize = 50;
/// Bytes of a message's `ext` object, as the client wrote it.
pub const MAX_EXT_BYTES: usize = 4096;

/// A group's id. Ids of groups and messages are distinct types where a function takes both,
/// so the two cannot be swapped; they bind to SQL as the BIGINT they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GroupId(pub i64);

/// A message's id within its group (`0`: before the first message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MsgId(pub i64);

macro_rules! display_as_number {
    ($($id:ty),*) => { $(
        impl fmt::Display for $id {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    )* };
}
display_as_number!(GroupId, MsgId);

/// At the SQL edge an id is the number it wraps.
impl From<GroupId> for i64 {
    fn from(id: GroupId) -> i64 {
        id.0
    }
}

impl From<MsgId> for i64 {
    fn from(id: MsgId) -> i64 {
        id.0
    }
}

/// A field failed validation; the message names the field and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError(pub String);

impl std::error::Error for ValidationError {}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn invalid(field: &str, rule: &str) -> ValidationError {
    ValidationError(format!("{field}: {rule}"))
}

/// A user id: 1–64 characters from `A-Z a-z 0-9 . _ @ : -`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserId(String);

/// The shape user and device ids share: 1 to `max` ASCII letters and digits, and `marks`.
fn parse_id(
    field: &str,
    raw: &str,
    max: usize,
    marks: &str,
    rule: &str,
) -> Result<String, ValidationError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || marks.contains(c);
    if raw.is_empty() || raw.len() > max || !raw.chars().all(allowed) {
        return Err(invalid(field, rule));
    }
    Ok(raw.to_owned())
}

impl UserId {
    pub fn parse(field: &str, raw: &str) -> Result<UserId, ValidationError> {
        let rule = "must be 1-64 characters from A-Z a-z 0-9 . _ @ : -";
        parse_id(field, raw, MAX_USER_ID_LEN, "._@:-", rule).map(UserId)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A device id, chosen by the client once per installation (a random UUID serves well): 1–64
/// characters from `A-Z a-z 0-9 . _ : -`. Device ids are global: the first user to use one
/// owns it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId(String);

pub const MAX_DEVICE_ID_LEN: usize = 64;

impl DeviceId {
    pub fn parse(field: &str, raw: &str) -> Result<DeviceId, ValidationError> {
        let rule = "must be 1-64 characters from A-Z a-z 0-9 . _ : -";
        parse_id(field, raw, MAX_DEVICE_ID_LEN, "._:-", rule).map(DeviceId)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The platform of a push target, as the operator's push service names it (`apns`, `fcm`,
/// `webpush`, …): 1–32 characters from `a-z 0-9 . _ -`. Chorus only hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushPlatform(String);

pub const MAX_PUSH_PLATFORM_LEN: usize = 32;
/// Bytes of a push token: APNs tokens are 64 hex digits and FCM tokens about 160 characters,
/// but a web-push subscription (its endpoint URL and keys) is longer.
pub const MAX_PUSH_TOKEN_BYTES: usize = 4096;

impl PushPlatform {
    pub fn parse(raw: &str) -> Result<PushPlatform, ValidationError> {
        let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-".contains(c);
        if raw.is_empty() || raw.len() > MAX_PUSH_PLATFORM_LEN || !raw.chars().all(allowed) {
            return Err(invalid(
                "platform",
                "must be 1-32 characters from a-z 0-9 . _ - (say apns or fcm)",
            ));
        }
        Ok(PushPlatform(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A device's push token, opaque to Chorus: 1–4096 bytes of text without control characters.
#[derive(Clone, PartialEq, Eq)]
pub struct PushToken(String);

/// A push token lets whoever holds it send to the phone: it stays out of logs.
impl fmt::Debug for PushToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PushToken([REDACTED])")
    }
}

impl PushToken {
    pub fn parse(raw: &str) -> Result<PushToken, ValidationError> {
        if raw.trim().is_empty()
            || raw.len() > MAX_PUSH_TOKEN_BYTES
            || raw.chars().any(char::is_control)
        {
            return Err(invalid(
                "token",
                "must be 1-4096 bytes of text without control characters, not only spaces",
            ));
        }
        Ok(PushToken(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A list of distinct user ids, in first-seen order.
pub fn parse_user_ids(field: &str, raw: &[String]) -> Result<Vec<String>, ValidationError> {
    if raw.len() > MAX_IDS_PER_REQUEST {
        return Err(invalid(field, "at most 1000 ids per request"));
    }
    let mut ids: Vec<String> = Vec::with_capacity(raw.len());
    for (i, id) in raw.iter().enumerate() {
        let id = UserId::parse(&format!("{field}[{i}]"), id)?;
        if !ids.iter().any(|known| known == id.as_str()) {
            ids.push(id.0);
        }
    }
    Ok(ids)
}

/// The members a message mentions: at most 50 distinct user ids, in first-seen order.
pub fn parse_mentions(raw: &[String]) -> Result<Vec<String>, ValidationError> {
    if raw.len() > MAX_MENTIONS {
        return Err(invalid("mentions", "at most 50 user ids"));
    }
    parse_user_ids("mentions", raw)
}

/// A message's client data: a JSON object of at most 4096 bytes as written (the body parser
/// has already checked that it is JSON).
pub fn parse_ext(raw: &str) -> Result<String, ValidationError> {
    if !raw.trim_start().starts_with('{') {
        return Err(invalid("ext", "must be a JSON object"));
    }
    if raw.len() > MAX_EXT_BYTES {
        return Err(invalid("ext", "must be at most 4096 bytes of JSON"));
    }
    Ok(raw.to_owned())
}

/// The sender's idempotency key: 1–128 printable ASCII characters, no spaces.
pub fn parse_client_msg_id(raw: &str) -> Result<String, ValidationError> {
    let printable = |c: char| c.is_ascii_graphic();
    if raw.is_empty() || raw.len() > MAX_CLIENT_MSG_ID_LEN || !raw.chars().all(printable) {
        return Err(invalid(
            "client_msg_id",
            "must be 1-128 printable ASCII characters without spaces",
        ));
    }
    Ok(raw.to_owned())
}

/// Message text: 1 byte to 16 KiB of UTF-8 with no NUL (PostgreSQL text cannot hold one).
pub fn parse_content(raw: &str) -> Result<String, ValidationError> {
    if raw.is_empty() || raw.len() > MAX_CONTENT_BYTES || raw.contains('\0') {
        return Err(invalid(
            "content",
            "must be 1-16384 bytes of UTF-8 text without NUL characters",
        ));
    }
    Ok(raw.to_owned())
}

/// A group name: 1–200 characters, no control characters, not only spaces.
pub fn parse_group_name(raw: &str) -> Result<String, ValidationError> {
    let trimmed = raw.trim();
    if trimmed.is_empty()
        || raw.chars().count() > MAX_GROUP_NAME_CHARS
        || raw.chars().any(char::is_control)
    {
        return Err(invalid(
            "name",
            "must be 1-200 characters without control characters",
        ));
    }
    Ok(trimmed.to_owned())
}

/// A page size: absent means the default, otherwise 1–200.
pub fn parse_limit(raw: Option<i64>) -> Result<i64, ValidationError> {
    match raw {
        None => Ok(DEFAULT_PAGE_LIMIT),
        Some(n) if (1..=MAX_PAGE_LIMIT).contains(&n) => Ok(n),
        Some(_) => Err(invalid("limit", "must be a whole number from 1 to 200")),
    }
}

/// A message id or cursor value: zero or more.
pub fn parse_msg_id(field: &str, raw: i64) -> Result<i64, ValidationError> {
    if raw < 0 {
        return Err(invalid(field, "must be a whole number, 0 or more"));
    }
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_ids_are_deduplicated_in_order() {
        let raw = vec!["bob".to_owned(), "amy".to_owned(), "bob".to_owned()];
        assert_eq!(
            parse_user_ids("member_ids", &raw).unwrap(),
            vec!["bob", "amy"]
        );
    }

    #[test]
    fn user_id_rejects_spaces_quotes_and_length() {
        assert!(UserId::parse("u", "a b").is_err());
        assert!(UserId::parse("u", "x'; DROP TABLE groups;--").is_err());
        assert!(UserId::parse("u", &"a".repeat(65)).is_err());
        assert!(UserId::parse("u", "").is_err());
        assert!(UserId::parse("u", "alice@example.com").is_ok());
    }

    #[test]
    fn device_id_accepts_uuids_and_rejects_spaces_at_signs_and_length() {
        assert!(DeviceId::parse("d", "3f2b9c1e-8a4d-4b7e-9f00-1c2d3e4f5a6b").is_ok());
        assert!(DeviceId::parse("d", "phone").is_ok());
        assert!(DeviceId::parse("d", "my phone").is_err());
        assert!(DeviceId::parse("d", "a@b").is_err());
        assert!(DeviceId::parse("d", "").is_err());
        assert!(DeviceId::parse("d", &"a".repeat(65)).is_err());
    }

    #[test]
    fn push_platform_and_token_name_their_field() {
        assert!(PushPlatform::parse("apns").is_ok());
        assert!(PushPlatform::parse("fcm-v1").is_ok());
        assert_eq!(
            PushPlatform::parse("APNs").unwrap_err().0,
            "platform: must be 1-32 characters from a-z 0-9 . _ - (say apns or fcm)"
        );
        assert!(PushPlatform::parse("").is_err());
        assert!(PushPlatform::parse(&"a".repeat(33)).is_err());
        assert!(PushToken::parse("3f2b9c1e").is_ok());
        assert!(PushToken::parse("   ")
            .unwrap_err()
            .0
            .starts_with("token: "));
        assert!(PushToken::parse("a\nb").is_err());
        assert!(PushToken::parse(&"x".repeat(MAX_PUSH_TOKEN_BYTES + 1)).is_err());
        assert_eq!(
            format!("{:?}", PushToken::parse("secret").unwrap()),
            "PushToken([REDACTED])"
        );
    }

    #[test]
    fn content_rejects_nul_and_oversize_but_keeps_unicode() {
        assert!(parse_content("a\0b").is_err());
        assert!(parse_content(&"x".repeat(MAX_CONTENT_BYTES + 1)).is_err());
        assert!(parse_content("").is_err());
        assert_eq!(parse_content("你好 👋").unwrap(), "你好 👋");
    }

    #[test]
    fn limit_defaults_and_bounds() {
        assert_eq!(parse_limit(None).unwrap(), DEFAULT_PAGE_LIMIT);
        assert!(parse_limit(Some(0)).is_err());
        assert!(parse_limit(Some(201)).is_err());
        assert_eq!(parse_limit(Some(200)).unwrap(), 200);
    }

    #[test]
    fn group_name_is_trimmed_and_rejects_control_characters() {
        assert_eq!(parse_group_name("  team  ").unwrap(), "team");
        assert!(parse_group_name("   ").is_err());
        assert!(parse_group_name("a\nb").is_err());
    }
}
