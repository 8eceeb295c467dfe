//! Raw SQL whose bind placeholders are written by the same call that binds their values, so
//! their numbers and count always agree (PostgreSQL numbers `$n` by n, SQLite by first
//! appearance: a query that introduces them out of order, or binds one too few, would read
//! the wrong values on one engine and not the other).

use chrono::NaiveDateTime;
use diesel::query_builder::BoxedSqlQuery;
use diesel::query_dsl::RunQueryDsl;
use diesel::sql_types::{BigInt, Text, Timestamp};
use diesel::{QueryResult, QueryableByName};

use super::{AnyConnection, MultiBackend};

enum Bind {
    Text(String),
    BigInt(i64),
    Timestamp(NaiveDateTime),
}

#[derive(Default)]
pub struct RawSql {
    text: String,
    binds: Vec<Bind>,
}

impl RawSql {
    /// Appends SQL text. It must hold no `$` placeholder: values go through [`RawSql::text`]
    /// and [`RawSql::int`].
    pub fn sql(mut self, text: &str) -> Self {
        debug_assert!(
            !text.contains('$'),
            "placeholders come from the bind methods"
        );
        self.text.push_str(text);
        self
    }

    /// Appends a placeholder for a text value and binds it.
    pub fn text(mut self, value: &str) -> Self {
        self.binds.push(Bind::Text(value.to_owned()));
        self.push_placeholder()
    }

    /// Appends a placeholder for an integer value and binds it.
    pub fn int(mut self, value: i64) -> Self {
        self.binds.push(Bind::BigInt(value));
        self.push_placeholder()
    }

    /// Appends a placeholder for a timestamp and binds it.
    pub fn time(mut self, value: NaiveDateTime) -> Self {
        self.binds.push(Bind::Timestamp(value));
        self.push_placeholder()
    }

    fn push_placeholder(mut self) -> Self {
        let n = self.binds.len();
        self.text.push_str(&format!("${n}"));
        self
    }

    pub fn load<R>(self, conn: &mut AnyConnection) -> QueryResult<Vec<R>>
    where
        R: QueryableByName<MultiBackend> + 'static,
    {
        self.into_query().load(conn)
    }

    pub fn execute(self, conn: &mut AnyConnection) -> QueryResult<usize> {
        self.into_query().execute(conn)
    }

    fn into_query(self) -> BoxedSqlQuery<'static, MultiBackend, diesel::query_builder::SqlQuery> {
        let mut query = diesel::sql_query(self.text).into_boxed();
        for bind in self.binds {
            query = match bind {
                Bind::Text(v) => query.bind::<Text, _>(v),
                Bind::BigInt(v) => query.bind::<BigInt, _>(v),
                Bind::Timestamp(v) => query.bind::<Timestamp, _>(v),
            };
        }
        query
    }

    #[cfg(test)]
    pub fn as_text(&self) -> &str {
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_bind_order() {
        let q = RawSql::default()
            .sql("SELECT 1 WHERE a = ")
            .text("x")
            .sql(" AND b > ")
            .int(3)
            .sql(" AND c = ")
            .text("x");
        assert_eq!(q.as_text(), "SELECT 1 WHERE a = $1 AND b > $2 AND c = $3");
        assert_eq!(q.binds.len(), 3);
    }
}
