//! The membership check read endpoints share, done in the same database call as their reads.

use super::error::ApiError;
use super::extract::AuthUser;
use super::AppState;
use crate::db::group::access::{member_of, Membership};
use crate::db::AnyConnection;
use crate::domain::GroupId;

/// Checks membership and, for a member, runs `then` with the group and membership rows, all
/// in one database call: a read endpoint costs one pooled connection and one trip to the
/// blocking pool, not one for the check and another for the data. A non-member gets 403, a
/// group that does not exist 404.
pub async fn read_as_member<T, F>(
    state: &AppState,
    group_id: GroupId,
    user: &AuthUser,
    then: F,
) -> Result<(Membership, T), ApiError>
where
    F: FnOnce(&mut AnyConnection, &Membership) -> diesel::QueryResult<T> + Send + 'static,
    T: Send + 'static,
{
    let user_id = user.id().to_owned();
    let found = state
        .db
        .read(move |conn| match member_of(conn, group_id, &user_id)? {
            Ok(membership) => {
                let value = then(conn, &membership)?;
                Ok(Ok((membership, value)))
            }
            Err(refusal) => Ok(Err(refusal)),
        })
        .await??;
    Ok(found)
}
