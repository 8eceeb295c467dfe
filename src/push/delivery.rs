//! One attempt at handing a notification to the push service: a signed POST, and what its
//! answer means for the notification.

use std::time::Duration;

use rand::Rng;
use secrecy::ExposeSecret;

use super::config::PushConfig;
use super::payload::{signature, IDEMPOTENCY_HEADER, SIGNATURE_HEADER};
use crate::db::push::push_outbox::Pending;

/// What became of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The push service took it (2xx).
    Delivered,
    /// It may take it later: no answer in time, no connection, 408, 429 or 5xx.
    Failed(String),
    /// It never will (any other status, say 400 for a body it cannot read): retrying would
    /// only repeat the refusal.
    Refused(u16),
}

pub struct Deliverer {
    client: reqwest::Client,
    url: url::Url,
    secret: secrecy::SecretString,
}

impl Deliverer {
    pub fn new(config: &PushConfig) -> Result<Deliverer, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            // The push service is the operator's own, reached directly: no proxy from the
            // environment, and a redirect is a misconfiguration to see, not to follow.
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Deliverer {
            client,
            url: config.url.clone(),
            secret: config.secret.clone(),
        })
    }

    pub async fn attempt(&self, pending: &Pending) -> Attempt {
        let signed = signature(
            self.secret.expose_secret().as_bytes(),
            pending.body.as_bytes(),
        );
        let sent = self
            .client
            .post(self.url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(IDEMPOTENCY_HEADER, &pending.key)
            .header(SIGNATURE_HEADER, signed)
            .body(pending.body.clone())
            .send()
            .await;
        match sent {
            Ok(response) => classify(response.status().as_u16()),
            Err(e) if e.is_timeout() => {
                Attempt::Failed("no answer within CHORUS_PUSH_TIMEOUT_MS".into())
            }
            Err(e) if e.is_connect() => Attempt::Failed(format!("cannot connect: {e}")),
            Err(e) => Attempt::Failed(e.to_string()),
        }
    }
}

fn classify(status: u16) -> Attempt {
    match status {
        200..=299 => Attempt::Delivered,
        408 | 429 | 500..=599 => Attempt::Failed(format!("HTTP {status}")),
        _ => Attempt::Refused(status),
    }
}

/// The wait before attempt `failures + 1`: half a second, doubling with each failure up to
/// `max`, and a random part (between half and all of it) so devices that failed together do
/// not all retry together.
pub fn backoff(failures: i64, max: Duration) -> Duration {
    let doublings = failures.clamp(0, 20) as u32;
    let full = Duration::from_millis(500)
        .saturating_mul(1 << doublings)
        .min(max);
    full.mul_f64(rand::rng().random_range(0.5..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_and_throttling_are_retried_other_refusals_are_not() {
        assert_eq!(classify(204), Attempt::Delivered);
        assert!(matches!(classify(503), Attempt::Failed(_)));
        assert!(matches!(classify(429), Attempt::Failed(_)));
        assert_eq!(classify(400), Attempt::Refused(400));
        assert_eq!(classify(302), Attempt::Refused(302));
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let max = Duration::from_secs(60);
        assert!(backoff(0, max) <= Duration::from_millis(500));
        assert!(backoff(3, max) >= Duration::from_secs(2));
        assert!(backoff(3, max) <= Duration::from_secs(4));
        assert!(backoff(1000, max) <= max);
        assert!(backoff(1000, max) >= max / 2);
    }
}
