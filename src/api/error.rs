//! The one error type handlers return, and the one JSON shape every error takes:
//! `{"error": {"code": "...", "message": "..."}}`.
//!
//! Policy: 4xx messages say what the client did wrong; a 500 says only "internal error" and the
//! cause goes to the log; a database that cannot be reached is 503 so clients retry.

use crate::domain::entries::EntryKind;
use crate::domain::refusal::Refusal;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use serde::Serialize;

use crate::db::device::push_targets::TargetRefusal;

use crate::db::DbError;
use crate::domain::ValidationError;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidJson(String),
    #[error("{0}")]
    InvalidQuery(String),
    #[error("{0}")]
    InvalidPath(String),
    #[error("{0}")]
    Validation(String),
    #[error("{0}")]
    Unauthorized(String),
    /// The token's device was signed out after the token was issued.
    #[error("{0}")]
    DeviceSignedOut(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Conflict(String),
    /// Only a named device may do this (register a push target), and the token names none.
    #[error("{0}")]
    DeviceRequired(String),
    #[error("{0}")]
    PayloadTooLarge(String),
    #[error("{0}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    AckBeyondLastMessage(String),
    /// The body points at an entry the group does not have for the caller (none with that
    /// id, or one from before they joined): well formed, but nothing to act on.
    #[error("{0}")]
    NoSuchEntry(String),
    /// The body mentions a user who is not a member of the group.
    #[error("{0}")]
    MentionOfNonMember(String),
    /// The entry is not a message with receipts (recalled, deleted, a change or a system line).
    #[error("{0}")]
    NoReceipts(String),
    #[error("{0}")]
    MessageRetracted(String),
    #[error("{0}")]
    NotAMessage(String),
    #[error("{0}")]
    RecallWindowPassed(String),
    #[error("{0}")]
    EditWindowPassed(String),
    #[error("{0}")]
    CursorExpired(String),
    #[error("{0}")]
    TooManyWaiters(String),
    #[error("{0}")]
    Unavailable(String),
    /// The database has no space for this write (a full disk, or SQLite's size cap).
    #[error("{0}")]
    StorageFull(String),
    /// `/readyz` says this instance should get no traffic yet: the code of `Unavailable`,
    /// without its `Retry-After`, since a load balancer's probe keeps its own schedule.
    #[error("{0}")]
    NotReady(String),
    #[error("internal error")]
    Internal(#[source] anyhow::Error),
}

/// A full disk is not freed within a second: a client retrying sooner only adds load.
const STORAGE_FULL_RETRY_AFTER_S: &str = "60";

#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    code: &'a str,
    message: String,
}

impl ApiError {
    /// The stable, documented machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::InvalidJson(_) => "invalid_json",
            ApiError::InvalidQuery(_) => "invalid_query",
            ApiError::InvalidPath(_) => "invalid_path",
            ApiError::Validation(_) => "validation_failed",
            ApiError::Unauthorized(_) => "unauthorized",
            ApiError::DeviceSignedOut(_) => "device_signed_out",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::MethodNotAllowed(_) => "method_not_allowed",
            ApiError::Conflict(_) => "conflict",
            ApiError::DeviceRequired(_) => "device_required",
            ApiError::PayloadTooLarge(_) => "payload_too_large",
            ApiError::UnsupportedMediaType(_) => "unsupported_media_type",
            ApiError::AckBeyondLastMessage(_) => "ack_beyond_last_message",
            ApiError::NoSuchEntry(_) => "no_such_entry",
            ApiError::MentionOfNonMember(_) => "mention_of_non_member",
            ApiError::NoReceipts(_) => "no_receipts",
            ApiError::MessageRetracted(_) => "message_retracted",
            ApiError::NotAMessage(_) => "not_a_message",
            ApiError::RecallWindowPassed(_) => "recall_window_passed",
            ApiError::EditWindowPassed(_) => "edit_window_passed",
            ApiError::CursorExpired(_) => "cursor_expired",
            ApiError::TooManyWaiters(_) => "too_many_waiters",
            ApiError::Unavailable(_) | ApiError::NotReady(_) => "unavailable",
            ApiError::StorageFull(_) => "storage_full",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            ApiError::InvalidJson(_)
            | ApiError::InvalidQuery(_)
            | ApiError::InvalidPath(_)
            | ApiError::Validation(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) | ApiError::DeviceSignedOut(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict(_)
            | ApiError::DeviceRequired(_)
            | ApiError::NoReceipts(_)
            | ApiError::MessageRetracted(_)
            | ApiError::NotAMessage(_)
            | ApiError::RecallWindowPassed(_)
            | ApiError::EditWindowPassed(_) => StatusCode::CONFLICT,
            ApiError::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            // Well-formed requests that the group's state refuses: the same body may succeed
            // later or elsewhere, unlike a 400, which no state makes valid.
            ApiError::AckBeyondLastMessage(_)
            | ApiError::NoSuchEntry(_)
            | ApiError::MentionOfNonMember(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ApiError::CursorExpired(_) => StatusCode::GONE,
            ApiError::TooManyWaiters(_) => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Unavailable(_) | ApiError::NotReady(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::StorageFull(_) => StatusCode::INSUFFICIENT_STORAGE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        if let ApiError::Internal(cause) = self {
            log_internal(cause);
        }
        let mut response = HttpResponse::build(self.status_code());
        match self {
            ApiError::Unauthorized(_) | ApiError::DeviceSignedOut(_) => {
                response.insert_header((header::WWW_AUTHENTICATE, "Bearer"));
            }
            ApiError::Unavailable(_) | ApiError::TooManyWaiters(_) => {
                response.insert_header((header::RETRY_AFTER, "1"));
            }
            ApiError::StorageFull(_) => {
                response.insert_header((header::RETRY_AFTER, STORAGE_FULL_RETRY_AFTER_S));
            }
            _ => {}
        }
        response.json(ErrorBody {
            error: ErrorDetail {
                code: self.code(),
                message: self.to_string(),
            },
        })
    }
}

/// One line: the error and its causes (`{:#}` joins them). The backtrace is added only when
/// one was captured, which `CHORUS_LOG_BACKTRACES` decides (see `logging`); `{:?}` would
/// print a multi-line cause list and whatever backtrace RUST_BACKTRACE made anyhow capture.
fn log_internal(cause: &anyhow::Error) {
    let backtrace = cause.backtrace();
    if backtrace.status() == std::backtrace::BacktraceStatus::Captured {
        tracing::error!(
            error = %format_args!("{cause:#}"),
            backtrace = %backtrace,
            "request failed with an internal error"
        );
    } else {
        tracing::error!(
            error = %format_args!("{cause:#}"),
            "request failed with an internal error"
        );
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        ApiError::Validation(e.0)
    }
}

impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        if e.is_unavailable() {
            tracing::warn!(error = %e, "database unavailable");
            ApiError::Unavailable("the database is unavailable; retry shortly".into())
        } else if e.is_storage_full() {
            // Logged once per episode where it is detected (db::engine::storage), not per request.
            ApiError::StorageFull(
                "the server has no storage space left for this write; retry later".into(),
            )
        } else {
            ApiError::Internal(e.into())
        }
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::NoGroup { group_id } => {
                ApiError::NotFound(format!("group {group_id} does not exist"))
            }
            Refusal::NotMember { group_id } => {
                ApiError::Forbidden(format!("you are not a member of group {group_id}"))
            }
            Refusal::OwnerOnly(what) => {
                ApiError::Forbidden(format!("only the group owner may {what}"))
            }
            Refusal::OwnerCannotLeave => {
                ApiError::Conflict("the owner cannot leave their group".into())
            }
            Refusal::NoSuchMember { user_id } => {
                ApiError::NotFound(format!("{user_id} is not a member of this group"))
            }
            Refusal::TooManyMembers {
                current,
                adding,
                max,
            } => ApiError::Conflict(format!(
                "a group holds at most {max} members; it has {current} and this would add {adding}"
            )),
            Refusal::NoMessage { group_id, msg_id } => ApiError::NotFound(format!(
                "message {msg_id} does not exist in group {group_id}"
            )),
            Refusal::ReceiptsOfOthers => ApiError::Forbidden(
                "only the message's sender and the group owner see its receipts".into(),
            ),
            Refusal::AckBeyondLastMessage {
                group_id,
                requested,
                last_msg_id,
            } => ApiError::AckBeyondLastMessage(format!(
                "cannot ack {requested} in group {group_id}: its last message is {last_msg_id}"
            )),
            Refusal::NoReceipts { .. }
            | Refusal::NoSuchEntry { .. }
            | Refusal::NotAMessage { .. }
            | Refusal::Retracted { .. }
            | Refusal::NotSender { .. }
            | Refusal::WindowPassed { .. }
            | Refusal::MentionOfNonMember { .. } => message_refusal(refusal),
            Refusal::InBatch { index, refusal } => {
                ApiError::from(*refusal).map_message(|m| format!("acks[{index}]: {m}"))
            }
        }
    }
}

impl From<TargetRefusal> for ApiError {
    fn from(refusal: TargetRefusal) -> Self {
        match refusal {
            TargetRefusal::NoDevice {
                device_id,
                by_default_device: false,
            } => ApiError::NotFound(format!("you have no signed-in device {device_id}")),
            TargetRefusal::NoDevice {
                device_id,
                by_default_device: true,
            } => ApiError::NotFound(format!(
                "you have no signed-in device {device_id}; a push target is registered by the \
                 device itself, with a token whose device_id is {device_id}"
            )),
            TargetRefusal::DeviceRequired { device_id } => ApiError::DeviceRequired(format!(
                "a push target belongs to the device it wakes: register it with a token whose \
                 device_id is {device_id} (this token names no device)"
            )),
            TargetRefusal::OtherDevice { device_id, calling } => ApiError::Forbidden(format!(
                "a push target belongs to the device it wakes: {device_id} registers its own \
                 (this token names {calling})"
            )),
        }
    }
}

/// The refusals about a message's state and what an entry may point at.
fn message_refusal(refusal: Refusal) -> ApiError {
    match refusal {
        Refusal::NoReceipts { msg_id, kind } => ApiError::NoReceipts(match kind {
            EntryKind::Recalled | EntryKind::Deleted => {
                format!("message {msg_id} was {}: it has no receipts", kind.as_str())
            }
            _ => format!(
                "entry {msg_id} is a {} entry: only messages have receipts",
                kind.as_str()
            ),
        }),
        Refusal::NoSuchEntry {
            field,
            group_id,
            msg_id,
        } => ApiError::NoSuchEntry(format!(
            "{field}: {msg_id} is not an earlier entry of group {group_id} that you can see"
        )),
        Refusal::NotAMessage {
            field,
            msg_id,
            kind,
        } => ApiError::NotAMessage(format!(
            "{field}: entry {msg_id} is a {} entry, not a message",
            kind.as_str()
        )),
        Refusal::Retracted { msg_id, kind } => {
            ApiError::MessageRetracted(format!("message {msg_id} was {}", kind.as_str()))
        }
        Refusal::NotSender { msg_id } => ApiError::Forbidden(format!(
            "only the sender of message {msg_id} may recall or edit it"
        )),
        Refusal::WindowPassed {
            change,
            msg_id,
            window_secs,
        } => {
            let (done, error): (_, fn(String) -> ApiError) = match change {
                EntryKind::Edit => ("edited", ApiError::EditWindowPassed),
                _ => ("recalled", ApiError::RecallWindowPassed),
            };
            error(format!(
                "message {msg_id} is older than the {window_secs} s in which it may be {done}"
            ))
        }
        Refusal::MentionOfNonMember { user_id } => ApiError::MentionOfNonMember(format!(
            "mentions: {user_id} is not a member of the group"
        )),
        other => ApiError::Internal(anyhow::anyhow!("{other:?} is not about a message")),
    }
}

impl ApiError {
    /// The same error with its message rewritten (say, to add where in a request it happened).
    fn map_message(self, f: impl FnOnce(String) -> String) -> ApiError {
        use ApiError::*;
        match self {
            InvalidJson(m) => InvalidJson(f(m)),
            InvalidQuery(m) => InvalidQuery(f(m)),
            InvalidPath(m) => InvalidPath(f(m)),
            Validation(m) => Validation(f(m)),
            Unauthorized(m) => Unauthorized(f(m)),
            DeviceSignedOut(m) => DeviceSignedOut(f(m)),
            Forbidden(m) => Forbidden(f(m)),
            NotFound(m) => NotFound(f(m)),
            MethodNotAllowed(m) => MethodNotAllowed(f(m)),
            Conflict(m) => Conflict(f(m)),
            DeviceRequired(m) => DeviceRequired(f(m)),
            PayloadTooLarge(m) => PayloadTooLarge(f(m)),
            UnsupportedMediaType(m) => UnsupportedMediaType(f(m)),
            AckBeyondLastMessage(m) => AckBeyondLastMessage(f(m)),
            NoSuchEntry(m) => NoSuchEntry(f(m)),
            MentionOfNonMember(m) => MentionOfNonMember(f(m)),
            NoReceipts(m) => NoReceipts(f(m)),
            MessageRetracted(m) => MessageRetracted(f(m)),
            NotAMessage(m) => NotAMessage(f(m)),
            RecallWindowPassed(m) => RecallWindowPassed(f(m)),
            EditWindowPassed(m) => EditWindowPassed(f(m)),
            CursorExpired(m) => CursorExpired(f(m)),
            TooManyWaiters(m) => TooManyWaiters(f(m)),
            Unavailable(m) => Unavailable(f(m)),
            StorageFull(m) => StorageFull(f(m)),
            NotReady(m) => NotReady(f(m)),
            Internal(cause) => Internal(cause),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::body::to_bytes;

    async fn body_of(e: ApiError) -> (u16, serde_json::Value) {
        let response = e.error_response();
        let status = response.status().as_u16();
        let bytes = to_bytes(response.into_body()).await.unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[actix_web::test]
    async fn error_envelope_has_code_and_message() {
        let (status, body) = body_of(ApiError::NotFound("group 7 does not exist".into())).await;
        assert_eq!(status, 404);
        assert_eq!(
            body,
            serde_json::json!({"error": {"code": "not_found", "message": "group 7 does not exist"}})
        );
    }

    #[actix_web::test]
    async fn not_ready_is_unavailable_without_retry_after() {
        let response = ApiError::NotReady("the database is not migrated".into()).error_response();
        assert_eq!(response.status(), 503);
        assert!(response.headers().get(header::RETRY_AFTER).is_none());
        let (_, body) = body_of(ApiError::NotReady("not migrated".into())).await;
        assert_eq!(body["error"]["code"], "unavailable");
    }

    #[actix_web::test]
    async fn internal_error_hides_its_cause() {
        let cause = anyhow::anyhow!("password authentication failed for user chorus");
        let (status, body) = body_of(ApiError::Internal(cause)).await;
        assert_eq!(status, 500);
        assert_eq!(body["error"]["message"], "internal error");
        assert!(!body.to_string().contains("password"));
    }
}
