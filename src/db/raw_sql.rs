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

    /// Appends `(v1, v2, ...)`, a list for `IN`, binding each value. `values` must not be
    /// empty (`IN ()` is an error on PostgreSQL).
    pub fn int_list(mut self, values: &[i64]) -> Self {
        debug_assert!(!values.is_empty(), "an empty IN list");
        self.text.push('(');
        for (i, &value) in values.iter().enumerate() {
            if i > 0 {
                self.text.push_str(", ");
            }
            self = self.int(value);
        }
        self.text.push(')');
        self
    }

    /// Appends a table of integer rows named `alias` with the given `columns`, for a join in
    /// `FROM`: `(SELECT column1 AS a, column2 AS b FROM (VALUES ($1, $2), ...) AS v) AS alias`.
    /// Both engines name a VALUES list's columns `column1`, `column2`, …; neither spells a
    /// column alias list on it the same way. Every row has one value per column, and there is
    /// at least one row.
    pub fn int_rows(mut self, alias: &str, columns: &[&str], rows: &[Vec<i64>]) -> Self {
        debug_assert!(!rows.is_empty(), "an empty VALUES list");
        let names: Vec<String> = (1..=columns.len())
            .zip(columns)
            .map(|(n, name)| format!("column{n} AS {name}"))
            .collect();
        self.text
            .push_str(&format!("(SELECT {} FROM (VALUES ", names.join(", ")));
        for (i, row) in rows.iter().enumerate() {
            debug_assert_eq!(row.len(), columns.len(), "one value per column");
            if i > 0 {
                self.text.push_str(", ");
            }
            self = self.int_list(row);
        }
        self.text.push_str(&format!(") AS v) AS {alias}"));
        self
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

    #[test]
    fn integer_rows_become_a_named_table_of_placeholders() {
        let q = RawSql::default()
            .sql("SELECT t.a FROM ")
            .int_rows("t", &["a", "b"], &[vec![1, 2], vec![3, 4]])
            .sql(" WHERE t.a IN ")
            .int_list(&[1, 3]);
        assert_eq!(
            q.as_text(),
            "SELECT t.a FROM (SELECT column1 AS a, column2 AS b FROM (VALUES ($1, $2), ($3, $4)) \
             AS v) AS t WHERE t.a IN ($5, $6)"
        );
        assert_eq!(q.binds.len(), 6);
    }
}
