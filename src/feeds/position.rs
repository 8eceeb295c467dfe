//! Feed positions: where a long-poll has read a change feed up to, and how one travels to a
//! client and back, signed, as the opaque `cursor` parameter.
//!
//! A feed position holds a watermark (`seen`): every change published at or below it was
//! reported. While a window of changes is handed out page by page it also holds the window's
//! end and the last change reported. Only positions this service signed are read back, so a
//! client can neither forge a watermark nor make an old cursor look new.

use base64::Engine;

use crate::db::read_models::changes::{Feed, MessageRef, Watermark};

/// A position in a change feed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedPosition {
    pub feed: Feed,
    /// Unix seconds when `seen` was read: the cursor's age, checked against retention.
    pub seen_at: i64,
    pub seen: Watermark,
    /// Set while a window of changes is being handed out page by page.
    pub window: Option<Window>,
}

/// The changes between `seen` and `upto`, reported up to and including `after`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub upto: Watermark,
    pub upto_at: i64,
    pub after: MessageRef,
}

/// The cursor format. Versions 1 and 2 (transaction snapshots, before published positions)
/// are still recognised, and answered as expired so clients start over as they do after
/// retention.
const CURSOR_VERSION: &str = "3";
const OUTDATED_CURSOR_VERSIONS: [&str; 2] = ["1", "2"];
/// Cursors are not accepted from more than this far in the future (clock skew between
/// instances).
const MAX_CLOCK_SKEW_SECS: i64 = 300;
const TAG_BYTES: usize = 16;

/// Signs and checks cursors, so only cursors this service issued are read: a client can
/// neither forge a watermark nor make an old cursor look new.
pub struct CursorSigner {
    key: Vec<u8>,
}

impl CursorSigner {
    /// Derives the cursor key from the token secret, so instances sharing a secret accept
    /// each other's cursors and the secret itself signs only tokens.
    pub fn new(secret: &[u8]) -> CursorSigner {
        CursorSigner {
            key: Self::mac(secret, b"chorus long-poll cursor key").to_vec(),
        }
    }

    fn mac(key: &[u8], data: &[u8]) -> [u8; 32] {
        use hmac::{KeyInit, Mac};
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key)
            .expect("HMAC accepts keys of any length");
        mac.update(data);
        mac.finalize().into_bytes().into()
    }

    fn sign(&self, text: &str) -> String {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let tag = Self::mac(&self.key, text.as_bytes());
        format!("{}.{}", b64.encode(text), b64.encode(&tag[..TAG_BYTES]))
    }

    fn open(&self, raw: &str) -> Option<String> {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let (body, tag) = raw.split_once('.')?;
        let text = String::from_utf8(b64.decode(body).ok()?).ok()?;
        let expected = Self::mac(&self.key, text.as_bytes());
        let given = b64.decode(tag).ok()?;
        // Constant-time comparison: the tag must not be guessable byte by byte.
        let same = given.len() == TAG_BYTES
            && given
                .iter()
                .zip(&expected[..TAG_BYTES])
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        same.then_some(text)
    }
}

impl FeedPosition {
    pub fn at(feed: Feed, seen: Watermark, seen_at: i64) -> FeedPosition {
        FeedPosition {
            feed,
            seen_at,
            seen,
            window: None,
        }
    }

    pub fn encode(&self, signer: &CursorSigner) -> String {
        let feed = match self.feed {
            Feed::Messages => "m",
            Feed::Receipts => "r",
        };
        let mut text = format!(
            "{CURSOR_VERSION}.{feed}.{}.{}",
            self.seen_at,
            self.seen.to_text()
        );
        if let Some(w) = &self.window {
            text.push_str(&format!(
                ".{}.{}.{}.{}",
                w.upto.to_text(),
                w.upto_at,
                w.after.group_id,
                w.after.msg_id
            ));
        }
        signer.sign(&text)
    }

    /// Whether `raw` is a cursor this service issued in an older format.
    pub fn is_outdated(raw: &str, signer: &CursorSigner) -> bool {
        signer.open(raw).is_some_and(|text| {
            OUTDATED_CURSOR_VERSIONS
                .iter()
                .any(|v| text.split('.').next() == Some(v))
        })
    }

    /// Reads a cursor this service issued for `feed`; None for anything else.
    pub fn decode(raw: &str, feed: Feed, signer: &CursorSigner) -> Option<FeedPosition> {
        let text = signer.open(raw)?;
        let parts: Vec<&str> = text.split('.').collect();
        let feed_tag = match feed {
            Feed::Messages => "m",
            Feed::Receipts => "r",
        };
        if parts.len() < 4 || parts[0] != CURSOR_VERSION || parts[1] != feed_tag {
            return None;
        }
        let latest = chrono::Utc::now().timestamp() + MAX_CLOCK_SKEW_SECS;
        let time = |t: &str| t.parse::<i64>().ok().filter(|t| (0..=latest).contains(t));
        let seen_at = time(parts[2])?;
        let seen = Watermark::parse(parts[3])?;
        let window = match parts.len() {
            4 => None,
            8 => Some(Window {
                upto: Watermark::parse(parts[4])?,
                upto_at: time(parts[5])?,
                after: MessageRef {
                    group_id: parts[6].parse().ok()?,
                    msg_id: parts[7].parse().ok()?,
                },
            }),
            _ => return None,
        };
        Some(FeedPosition {
            feed,
            seen_at,
            seen,
            window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_are_bound_to_their_feed() {
        let signer = CursorSigner::new(b"test secret");
        let seen = Watermark::parse("5").unwrap();
        let mut cursor = FeedPosition::at(Feed::Receipts, seen, 1_700_000_000);
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Receipts, &signer),
            Some(cursor.clone())
        );
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Messages, &signer),
            None
        );
        cursor.window = Some(Window {
            upto: Watermark::parse("9").unwrap(),
            upto_at: 1_700_000_005,
            after: MessageRef {
                group_id: 3,
                msg_id: 44,
            },
        });
        assert_eq!(
            FeedPosition::decode(&cursor.encode(&signer), Feed::Receipts, &signer),
            Some(cursor)
        );
        assert_eq!(
            FeedPosition::decode("not-a-cursor", Feed::Receipts, &signer),
            None
        );
        assert_eq!(FeedPosition::decode("", Feed::Receipts, &signer), None);
    }

    #[test]
    fn forged_tampered_and_foreign_cursors_are_refused() {
        let signer = CursorSigner::new(b"test secret");
        let other = CursorSigner::new(b"another secret");
        let now = chrono::Utc::now().timestamp();
        let cursor = FeedPosition::at(Feed::Messages, Watermark::parse("3").unwrap(), now);
        let issued = cursor.encode(&signer);
        let (body, tag) = issued.split_once('.').unwrap();
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let forged_body = b64.encode(format!("3.m.{now}.0"));

        assert_eq!(
            FeedPosition::decode(&issued, Feed::Messages, &signer),
            Some(cursor)
        );
        assert_eq!(
            FeedPosition::decode(&issued, Feed::Messages, &other),
            None,
            "another secret"
        );
        assert_eq!(
            FeedPosition::decode(&format!("{forged_body}.{tag}"), Feed::Messages, &signer),
            None
        );
        assert_eq!(
            FeedPosition::decode(body, Feed::Messages, &signer),
            None,
            "no tag"
        );
    }

    #[test]
    fn cursors_from_the_future_or_before_the_epoch_are_refused() {
        let signer = CursorSigner::new(b"test secret");
        for seen_at in [i64::MAX, i64::MIN] {
            let cursor = FeedPosition::at(Feed::Messages, Watermark::parse("3").unwrap(), seen_at);
            assert_eq!(
                FeedPosition::decode(&cursor.encode(&signer), Feed::Messages, &signer),
                None,
                "seen at {seen_at}"
            );
        }
    }

    #[test]
    fn cursors_of_the_previous_format_are_recognised_as_outdated() {
        let signer = CursorSigner::new(b"test secret");
        let current = FeedPosition::at(
            Feed::Messages,
            Watermark::parse("3").unwrap(),
            chrono::Utc::now().timestamp(),
        )
        .encode(&signer);
        let now = chrono::Utc::now().timestamp();
        let previous = signer.sign(&format!("1.m.{now}.3:3:"));
        let snapshots = signer.sign(&format!("2.m.{now}.3:3:"));

        assert!(FeedPosition::is_outdated(&previous, &signer));
        assert!(FeedPosition::is_outdated(&snapshots, &signer));
        assert_eq!(
            FeedPosition::decode(&snapshots, Feed::Messages, &signer),
            None
        );
        assert_eq!(
            FeedPosition::decode(&previous, Feed::Messages, &signer),
            None
        );
        assert!(!FeedPosition::is_outdated(&current, &signer));
        assert!(!FeedPosition::is_outdated("garbage", &signer));
    }
}
