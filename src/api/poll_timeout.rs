//! How long a long-poll (`/v1/sync`, `/v1/receipts`) may wait: its `timeout_s` parameter.

use std::time::Duration;

use super::error::ApiError;

/// The wait when a poll names none (the spec's default for `timeout_s`).
pub const DEFAULT_TIMEOUT_S: i64 = 25;
/// The longest wait: a larger `timeout_s` waits this long.
pub const MAX_TIMEOUT_S: i64 = 60;

/// What `timeout_s` accepts, in the words of its errors (whatever is wrong with it).
pub const TIMEOUT_RULE: &str = "must be a whole number of seconds, 0 or more (above 60 waits 60)";

pub fn parse_timeout(raw: Option<i64>) -> Result<Duration, ApiError> {
    match raw {
        None => Ok(Duration::from_secs(DEFAULT_TIMEOUT_S as u64)),
        Some(s) if s < 0 => Err(ApiError::Validation(format!("timeout_s: {TIMEOUT_RULE}"))),
        Some(s) => Ok(Duration::from_secs(s.min(MAX_TIMEOUT_S) as u64)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_defaults_clamps_and_rejects_negative() {
        assert_eq!(parse_timeout(None).unwrap(), Duration::from_secs(25));
        assert_eq!(parse_timeout(Some(600)).unwrap(), Duration::from_secs(60));
        assert_eq!(parse_timeout(Some(0)).unwrap(), Duration::ZERO);
        assert!(parse_timeout(Some(-1)).is_err());
    }
}
