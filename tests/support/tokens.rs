//! Bearer tokens for test and bench users, signed with the secret every harnessed server is
//! started with.

use chorus::auth::TokenKeys;
use chorus::domain::{DeviceId, UserId};

/// The JWT secret of every server the harness starts.
pub const SECRET: &str = "harness-secret-harness-secret-harness-0123";
/// Longer than the longest bench run, so no token expires while it is in use.
const LIFETIME_S: i64 = 4 * 3600;

pub struct TokenMint {
    keys: TokenKeys,
}

impl Default for TokenMint {
    fn default() -> TokenMint {
        TokenMint::new()
    }
}

impl TokenMint {
    pub fn new() -> TokenMint {
        let keys = TokenKeys::new(SECRET.as_bytes(), false).expect("the harness secret is valid");
        TokenMint { keys }
    }

    /// A token for `caller`: a user id for the user's default device, or `user#device` for
    /// one of their named devices (`#` never appears in either id).
    pub fn token(&self, caller: &str) -> String {
        let (user, device) = match caller.split_once('#') {
            Some((user, device)) => (user, Some(device)),
            None => (caller, None),
        };
        let user = UserId::parse("user", user).expect("valid test user id");
        let device = device.map(|d| DeviceId::parse("device", d).expect("valid test device id"));
        self.keys
            .issue_for_device(&user, device.as_ref(), LIFETIME_S)
            .expect("sign a test token")
    }

    /// One token per user, in the same order.
    pub fn tokens(&self, users: &[String]) -> Vec<String> {
        users.iter().map(|user| self.token(user)).collect()
    }
}
