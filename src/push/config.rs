//! The push settings, checked once at start: a server whose push URL or secret is wrong says
//! so in one line naming the setting and does not start, instead of failing every delivery.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use crate::config::Settings;
use crate::redact::redact_url;

/// Shorter secrets are guessable; the same floor as the JWT secret's.
pub const MIN_SECRET_BYTES: usize = 32;

#[derive(Debug, Clone)]
pub struct PushConfig {
    pub url: url::Url,
    pub secret: SecretString,
    pub grace: Duration,
    pub interval: Duration,
    pub timeout: Duration,
    pub retry_for: Duration,
    pub backoff_max: Duration,
    pub content: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushConfigError {
    #[error("CHORUS_PUSH_URL {url:?} is not a URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error(
        "CHORUS_PUSH_URL {url:?} must be an http:// URL with a host: Chorus speaks plain HTTP \
         to the push service (put TLS in a proxy beside it, see DEPLOYING.md)"
    )]
    NotHttp { url: String },
    #[error("CHORUS_PUSH_SECRET is required with CHORUS_PUSH_URL: it signs every notification")]
    MissingSecret,
    #[error("CHORUS_PUSH_SECRET must be at least {MIN_SECRET_BYTES} bytes; it has {len}")]
    ShortSecret { len: usize },
    #[error("CHORUS_PUSH_SECRET is set but CHORUS_PUSH_URL is not: set both to turn push on")]
    SecretWithoutUrl,
    #[error("CHORUS_PUSH_TIMEOUT_MS must be at least 1")]
    ZeroTimeout,
}

impl PushConfig {
    /// The push settings when push is on (a URL is set), None when it is off.
    pub fn from_settings(settings: &Settings) -> Result<Option<PushConfig>, PushConfigError> {
        let Some(raw) = settings.push_url.as_deref() else {
            return match settings.push_secret {
                Some(_) => Err(PushConfigError::SecretWithoutUrl),
                None => Ok(None),
            };
        };
        let url = parse_url(raw)?;
        let secret = settings
            .push_secret
            .clone()
            .ok_or(PushConfigError::MissingSecret)?;
        let len = secret.expose_secret().len();
        if len < MIN_SECRET_BYTES {
            return Err(PushConfigError::ShortSecret { len });
        }
        if settings.push_timeout_ms == 0 {
            return Err(PushConfigError::ZeroTimeout);
        }
        Ok(Some(PushConfig {
            url,
            secret,
            grace: Duration::from_millis(settings.push_grace_ms),
            interval: Duration::from_millis(settings.push_interval_ms),
            timeout: Duration::from_millis(settings.push_timeout_ms),
            retry_for: Duration::from_secs(settings.push_retry_for_secs),
            backoff_max: Duration::from_millis(settings.push_backoff_max_ms),
            content: settings.push_content,
        }))
    }

    /// How often the job looks for due devices and due retries: often enough that neither the
    /// grace period nor the interval is overshot by much, and never more than once per 50 ms.
    pub fn tick(&self) -> Duration {
        (self.grace.min(self.interval) / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
    }

    /// How long a delivery attempt is leased: longer than the attempt can take (its timeout),
    /// with room for recording its outcome, so a live instance never loses its lease.
    pub fn lease(&self) -> Duration {
        self.timeout * 2 + Duration::from_secs(2)
    }
}

fn parse_url(raw: &str) -> Result<url::Url, PushConfigError> {
    let shown = redact_url(raw);
    let url = url::Url::parse(raw).map_err(|e| PushConfigError::BadUrl {
        url: shown.clone(),
        reason: e.to_string(),
    })?;
    if url.scheme() != "http" || url.host_str().is_none_or(str::is_empty) {
        return Err(PushConfigError::NotHttp { url: shown });
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(url: Option<&str>, secret: Option<&str>) -> Settings {
        let mut s = Settings::defaults();
        s.push_url = url.map(str::to_owned);
        s.push_secret = secret.map(SecretString::from);
        s
    }

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn push_is_off_without_a_url_and_on_with_a_url_and_a_secret() {
        assert!(PushConfig::from_settings(&settings(None, None))
            .unwrap()
            .is_none());
        let on =
            PushConfig::from_settings(&settings(Some("http://127.0.0.1:9/push"), Some(SECRET)))
                .unwrap()
                .expect("on");
        assert_eq!(on.url.as_str(), "http://127.0.0.1:9/push");
        assert!(!on.content, "content is off by default");
    }

    #[test]
    fn each_bad_setting_is_named() {
        let err = |url, secret| {
            PushConfig::from_settings(&settings(url, secret))
                .unwrap_err()
                .to_string()
        };
        assert!(err(Some("not a url"), Some(SECRET)).starts_with("CHORUS_PUSH_URL"));
        assert!(err(Some("ftp://h/x"), Some(SECRET)).contains("http://"));
        assert!(err(Some("https://h/x"), Some(SECRET)).contains("DEPLOYING.md"));
        assert!(err(Some("http://h/x"), None).starts_with("CHORUS_PUSH_SECRET is required"));
        assert_eq!(
            err(Some("http://h/x"), Some("short")),
            "CHORUS_PUSH_SECRET must be at least 32 bytes; it has 5"
        );
        assert!(err(None, Some(SECRET)).contains("CHORUS_PUSH_URL is not"));
    }

    #[test]
    fn a_password_in_the_url_is_not_repeated_in_the_error() {
        let message =
            PushConfig::from_settings(&settings(Some("ftp://u:hunter2@h/"), Some(SECRET)))
                .unwrap_err()
                .to_string();
        assert!(!message.contains("hunter2"), "{message}");
    }

    #[test]
    fn the_tick_follows_grace_and_interval_within_bounds() {
        let mut config = PushConfig::from_settings(&settings(Some("http://h/"), Some(SECRET)))
            .unwrap()
            .unwrap();
        assert_eq!(config.tick(), Duration::from_secs(1));
        config.grace = Duration::from_millis(400);
        assert_eq!(config.tick(), Duration::from_millis(100));
        config.interval = Duration::ZERO;
        assert_eq!(config.tick(), Duration::from_millis(50));
    }
}
