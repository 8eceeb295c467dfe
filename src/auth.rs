//! Bearer tokens: HS256 JWTs whose `sub` is the user id. The algorithm is fixed by the server,
//! `exp` is required; a token that fails any check is simply not a user.

use std::path::Path;

use jsonwebtoken::{decode, encode, Algorithm, DecodingKey, EncodingKey, Header, Validation};
use secrecy::{ExposeSecret, SecretSlice, SecretString};
use serde::{Deserialize, Serialize};

use crate::domain::{DeviceId, UserId};

/// Shortest secret accepted from configuration: HS256 keys below 256 bits are guessable.
pub const MIN_SECRET_BYTES: usize = 32;
const DEV_SECRET_FILE: &str = "dev-jwt-secret";

#[derive(Debug, Serialize, Deserialize)]
struct Claims {
    sub: String,
    exp: i64,
    /// When the token was issued. Tokens from other issuers may leave it out (then 0); a
    /// signed-out device refuses tokens issued before its sign-out.
    #[serde(default)]
    iat: i64,
    /// The device the token speaks for; absent for the user's default device.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    device_id: Option<String>,
}

/// Who a valid token speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub user_id: UserId,
    /// None: the user's default device (clients that name no device).
    pub device: Option<DeviceId>,
    /// Unix seconds (`iat`), 0 when the issuer left it out.
    pub issued_at: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("token rejected: {0}")]
    Invalid(String),
    /// The signature is good but a claim breaks its rule (the message names the claim).
    #[error("token claim {0}")]
    BadClaim(String),
    #[error("could not sign token: {0}")]
    Signing(String),
}

pub struct TokenKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    /// True when the secret was generated for development rather than configured.
    pub development: bool,
}

impl TokenKeys {
    pub fn new(secret: &[u8], development: bool) -> Result<TokenKeys, TokenError> {
        let key_error = |e: jsonwebtoken::errors::Error| TokenError::Signing(e.to_string());
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_required_spec_claims(&["exp", "sub"]);
        validation.validate_nbf = true;
        validation.leeway = 5;
        Ok(TokenKeys {
            encoding: EncodingKey::from_secret(secret).map_err(key_error)?,
            decoding: DecodingKey::from_secret(secret).map_err(key_error)?,
            validation,
            development,
        })
    }

    pub fn issue(&self, user_id: &UserId, ttl_seconds: i64) -> Result<String, TokenError> {
        self.issue_for_device(user_id, None, ttl_seconds)
    }

    /// A token for one of the user's devices (None: their default device).
    pub fn issue_for_device(
        &self,
        user_id: &UserId,
        device: Option<&DeviceId>,
        ttl_seconds: i64,
    ) -> Result<String, TokenError> {
        let now = chrono::Utc::now().timestamp();
        let claims = Claims {
            sub: user_id.as_str().to_owned(),
            iat: now,
            exp: now + ttl_seconds,
            device_id: device.map(|d| d.as_str().to_owned()),
        };
        encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .map_err(|e| TokenError::Signing(e.to_string()))
    }

    pub fn verify(&self, token: &str) -> Result<Identity, TokenError> {
        let claims = decode::<Claims>(token, &self.decoding, &self.validation)
            .map_err(|e| TokenError::Invalid(e.to_string()))?
            .claims;
        let invalid = |e: crate::domain::ValidationError| TokenError::BadClaim(e.to_string());
        Ok(Identity {
            user_id: UserId::parse("sub", &claims.sub).map_err(invalid)?,
            device: claims
                .device_id
                .as_deref()
                .map(|d| DeviceId::parse("device_id", d))
                .transpose()
                .map_err(invalid)?,
            issued_at: claims.iat,
        })
    }
}

/// The secret that signs tokens and long-poll cursors.
pub struct SigningSecret {
    pub bytes: SecretSlice<u8>,
    /// True when the secret was generated for development rather than configured.
    pub development: bool,
}

/// The configured secret, or else the development secret kept in the data directory (created
/// on first use, readable by the owner only).
pub fn load_secret(
    configured: Option<&SecretString>,
    data_dir: &Path,
) -> anyhow::Result<SigningSecret> {
    if let Some(secret) = configured {
        let secret = secret.expose_secret();
        anyhow::ensure!(
            secret.len() >= MIN_SECRET_BYTES,
            "CHORUS_JWT_SECRET must be at least {MIN_SECRET_BYTES} bytes"
        );
        return Ok(SigningSecret {
            bytes: secret.as_bytes().to_vec().into(),
            development: false,
        });
    }
    let path = data_dir.join(DEV_SECRET_FILE);
    let secret = match std::fs::read_to_string(&path) {
        Ok(existing) => {
            let existing = existing.trim();
            anyhow::ensure!(
                existing.len() >= MIN_SECRET_BYTES,
                "{} is too short; delete it to generate a new one",
                path.display()
            );
            existing.to_owned()
        }
        Err(_) => {
            crate::config::create_data_dir(data_dir)?;
            let secret = generate_secret();
            write_private(&path, &secret).map_err(|e| {
                anyhow::anyhow!(
                    "cannot write the development secret {}: {e}; set CHORUS_JWT_SECRET or \
                     make the data directory writable",
                    path.display()
                )
            })?;
            secret
        }
    };
    Ok(SigningSecret {
        bytes: secret.into_bytes().into(),
        development: true,
    })
}

/// 32 random bytes as hex: a secret as strong as HS256 can use, and printable.
fn generate_secret() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(contents.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> TokenKeys {
        TokenKeys::new(&[7u8; 32], false).unwrap()
    }

    #[test]
    fn issued_token_verifies_to_its_user() {
        let user = UserId::parse("sub", "alice").unwrap();
        let token = keys().issue(&user, 60).unwrap();
        let identity = keys().verify(&token).unwrap();
        assert_eq!(identity.user_id, user);
        assert_eq!(identity.device, None);
    }

    #[test]
    fn device_token_names_its_device() {
        let user = UserId::parse("sub", "alice").unwrap();
        let phone = DeviceId::parse("device_id", "phone-1").unwrap();
        let token = keys().issue_for_device(&user, Some(&phone), 60).unwrap();
        assert_eq!(keys().verify(&token).unwrap().device, Some(phone));
    }

    #[test]
    fn expired_token_is_rejected() {
        let user = UserId::parse("sub", "alice").unwrap();
        let token = keys().issue(&user, -60).unwrap();
        assert!(keys().verify(&token).is_err());
    }

    #[test]
    fn token_signed_with_another_secret_is_rejected() {
        let user = UserId::parse("sub", "alice").unwrap();
        let token = TokenKeys::new(&[8u8; 32], false)
            .unwrap()
            .issue(&user, 60)
            .unwrap();
        assert!(keys().verify(&token).is_err());
    }

    #[test]
    fn unsigned_alg_none_token_is_rejected() {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let header = b64.encode(r#"{"alg":"none","typ":"JWT"}"#);
        let exp = chrono::Utc::now().timestamp() + 600;
        let claims = b64.encode(format!(r#"{{"sub":"alice","exp":{exp}}}"#));
        assert!(keys().verify(&format!("{header}.{claims}.")).is_err());
    }
}
