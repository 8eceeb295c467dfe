//! How the domain's types cross the SQL edge: ids bound as the BIGINT they are, entry kinds
//! and roles read from their stored spelling. The domain itself knows nothing of diesel; the
//! derives below (`foreign_derive`) implement diesel's traits for the wrapped domain type.

use diesel::backend::Backend;
use diesel::deserialize::{self, FromSql, FromSqlRow};
use diesel::expression::AsExpression;
use diesel::serialize::{Output, ToSql};
use diesel::sql_types::{BigInt, Text};

use crate::domain::entries::{EntryKind, Role};
use crate::domain::{GroupId, MsgId};

#[derive(AsExpression)]
#[diesel(foreign_derive, sql_type = BigInt)]
#[allow(dead_code)]
struct GroupIdAsBigInt(GroupId);

#[derive(AsExpression)]
#[diesel(foreign_derive, sql_type = BigInt)]
#[allow(dead_code)]
struct MsgIdAsBigInt(MsgId);

macro_rules! bind_as_bigint {
    ($($id:ty),*) => { $(
        impl<DB> ToSql<BigInt, DB> for $id
        where
            DB: Backend,
            i64: ToSql<BigInt, DB>,
        {
            fn to_sql<'b>(&'b self, out: &mut Output<'b, '_, DB>) -> diesel::serialize::Result {
                self.0.to_sql(out)
            }
        }
    )* };
}
bind_as_bigint!(GroupId, MsgId);

#[derive(FromSqlRow)]
#[diesel(foreign_derive)]
#[allow(dead_code)]
struct StoredEntryKind(EntryKind);

#[derive(FromSqlRow)]
#[diesel(foreign_derive)]
#[allow(dead_code)]
struct StoredRole(Role);

/// Read from its stored spelling; a spelling no kind has is a deserialization error.
impl<DB> FromSql<Text, DB> for EntryKind
where
    DB: Backend,
    String: FromSql<Text, DB>,
{
    fn from_sql(bytes: DB::RawValue<'_>) -> deserialize::Result<Self> {
        let stored = String::from_sql(bytes)?;
        Ok(EntryKind::try_from(stored)?)
    }
}

impl<DB> FromSql<Text, DB> for Role
where
    DB: Backend,
    String: FromSql<Text, DB>,
{
    fn from_sql(stored: DB::RawValue<'_>) -> deserialize::Result<Role> {
        Ok(Role::try_from(String::from_sql(stored)?)?)
    }
}
