//! The body of `POST /v1/groups/{group_id}/messages`: one shape for every entry a member
//! appends (a message, or a recall, edit or delete of an earlier one), checked field by field
//! into the entry the database call takes. Each kind names the fields it takes; a field of
//! another kind is refused, so a client's mistake is never silently ignored.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::error::ApiError;
use crate::db::message::message_changes::Change;
use crate::db::message::messages::{MessageDraft, UserEntry};
use crate::domain::MsgId;
use crate::domain::{parse_client_msg_id, parse_content, parse_ext, parse_mentions, parse_msg_id};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessageBody {
    client_msg_id: String,
    kind: Option<String>,
    content: Option<String>,
    #[serde(default, deserialize_with = "super::json_body::optional_whole_number")]
    target_msg_id: Option<i64>,
    mentions: Option<Vec<String>>,
    mention_all: Option<bool>,
    #[serde(default, deserialize_with = "super::json_body::optional_whole_number")]
    reply_to_msg_id: Option<i64>,
    ext: Option<Box<RawValue>>,
}

/// The kinds a member may append; the others are written by the server.
const USER_KINDS: &str = "message, recall, edit, delete";

impl SendMessageBody {
    /// The idempotency key and the entry, or the first field that is wrong.
    pub fn parse(&self) -> Result<(String, UserEntry), ApiError> {
        let client_msg_id = parse_client_msg_id(&self.client_msg_id)?;
        let kind = self.kind.as_deref().unwrap_or("message");
        let entry = match kind {
            "message" => UserEntry::Message(self.draft()?),
            "recall" => self.change(kind, Change::Recall)?,
            "delete" => self.change(kind, Change::Delete)?,
            "edit" => {
                let content = parse_content(self.required("content", kind, &self.content)?)?;
                self.change(kind, Change::Edit { content })?
            }
            _ => return Err(invalid(format!("kind: must be one of {USER_KINDS}"))),
        };
        Ok((client_msg_id, entry))
    }

    fn draft(&self) -> Result<MessageDraft, ApiError> {
        self.refuse_present(
            "message",
            &[("target_msg_id", self.target_msg_id.is_some())],
        )?;
        let content = parse_content(self.required("content", "message", &self.content)?)?;
        let reply_to = self
            .reply_to_msg_id
            .map(|id| parse_msg_id("reply_to_msg_id", id).map(MsgId))
            .transpose()?;
        let ext = self
            .ext
            .as_ref()
            .map(|raw| parse_ext(raw.get()))
            .transpose()?;
        Ok(MessageDraft {
            content,
            mentions: parse_mentions(self.mentions.as_deref().unwrap_or_default())?,
            mention_all: self.mention_all.unwrap_or(false),
            reply_to,
            ext,
        })
    }

    /// A change of `target_msg_id`; only an edit takes content, and no change takes a
    /// message's other fields.
    fn change(&self, kind: &str, change: Change) -> Result<UserEntry, ApiError> {
        let target = parse_msg_id(
            "target_msg_id",
            *self.required("target_msg_id", kind, &self.target_msg_id)?,
        )?;
        self.refuse_present(
            kind,
            &[
                ("content", kind != "edit" && self.content.is_some()),
                ("mentions", self.mentions.is_some()),
                ("mention_all", self.mention_all.is_some()),
                ("reply_to_msg_id", self.reply_to_msg_id.is_some()),
                ("ext", self.ext.is_some()),
            ],
        )?;
        Ok(UserEntry::Change {
            change,
            target: MsgId(target),
        })
    }

    fn required<'a, T>(
        &self,
        field: &str,
        kind: &str,
        value: &'a Option<T>,
    ) -> Result<&'a T, ApiError> {
        value
            .as_ref()
            .ok_or_else(|| invalid(format!("{field}: required when kind is {kind}")))
    }

    fn refuse_present(&self, kind: &str, fields: &[(&str, bool)]) -> Result<(), ApiError> {
        match fields.iter().find(|(_, present)| *present) {
            Some((field, _)) => Err(invalid(format!(
                "{field}: not accepted when kind is {kind}"
            ))),
            None => Ok(()),
        }
    }
}

fn invalid(message: String) -> ApiError {
    ApiError::Validation(message)
}
