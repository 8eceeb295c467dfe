//! Raw SQL whose bind placeholders are written by the same call that binds their values, so
//! their numbers and count always agree (PostgreSQL numbers `$n` by n, SQLite by first
//! appearance: a query that introduces them out of order, or binds one too few, would read
//! the wrong values on one engine and not the other).
//!
//! A statement is prepared anew on every run unless it says [`RawSql::keep_prepared`]: then
//! each connection keeps it prepared, keyed by its text. On SQLite, parsing and planning a
//! one-row write costs more than running it.

use chrono::NaiveDateTime;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::RunQueryDsl;
use diesel::sql_types::{BigInt, Text, Timestamp, Untyped};
use diesel::{QueryResult, QueryableByName};

use super::{AnyConnection, MultiBackend};

enum Bind {
    Text(String),
    BigInt(i64),
    Timestamp(NaiveDateTime),
}

/// One value of a row of [`RawSql::rows`].
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Int(i64),
    Text(&'a str),
}

pub struct RawSql {
    /// The text around the placeholders: one piece more than there are binds, the n-th
    /// placeholder between piece n-1 and piece n.
    pieces: Vec<String>,
    binds: Vec<Bind>,
    keep_prepared: bool,
    /// Holds a list of more than one value: its text varies with the list's length.
    sized_by_a_list: bool,
}

impl Default for RawSql {
    fn default() -> Self {
        RawSql {
            pieces: vec![String::new()],
            binds: Vec::new(),
            keep_prepared: false,
            sized_by_a_list: false,
        }
    }
}

impl RawSql {
    /// Appends SQL text. It must hold no `$` placeholder: values go through [`RawSql::text`]
    /// and [`RawSql::int`].
    pub fn sql(mut self, text: &str) -> Self {
        debug_assert!(
            !text.contains('$'),
            "placeholders come from the bind methods"
        );
        self.push_text(text);
        self
    }

    /// Keeps the statement prepared on each connection, unless it holds a list of more than
    /// one value ([`RawSql::int_list`], [`RawSql::int_rows`]): each length would be a text of
    /// its own, kept for the connection's lifetime. For a statement whose text is otherwise
    /// the same on every call (its values all bound).
    pub fn keep_prepared(mut self) -> Self {
        self.keep_prepared = true;
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
        self.sized_by_a_list |= values.len() > 1;
        self.push_text("(");
        for (i, &value) in values.iter().enumerate() {
            if i > 0 {
                self.push_text(", ");
            }
            self = self.int(value);
        }
        self.push_text(")");
        self
    }

    /// Appends a table of integer rows named `alias` with the given `columns`, for a join in
    /// `FROM` (see [`RawSql::rows`]).
    pub fn int_rows(self, alias: &str, columns: &[&str], rows: &[Vec<i64>]) -> Self {
        let rows: Vec<Vec<Value<'_>>> = rows
            .iter()
            .map(|row| row.iter().map(|&v| Value::Int(v)).collect())
            .collect();
        self.rows(alias, columns, &rows)
    }

    /// Appends a table of rows named `alias` with the given `columns`, for a join in `FROM`:
    /// `(SELECT column1 AS a, column2 AS b FROM (VALUES ($1, $2), ...) AS v) AS alias`, each
    /// value bound. Both engines name a VALUES list's columns `column1`, `column2`, …;
    /// neither spells a column alias list on it the same way. Every row has one value per
    /// column, of the same kind in every row, and there is at least one row.
    pub fn rows(mut self, alias: &str, columns: &[&str], rows: &[Vec<Value<'_>>]) -> Self {
        debug_assert!(!rows.is_empty(), "an empty VALUES list");
        self.sized_by_a_list |= rows.len() > 1;
        let names: Vec<String> = (1..=columns.len())
            .zip(columns)
            .map(|(n, name)| format!("column{n} AS {name}"))
            .collect();
        self.push_text(&format!("(SELECT {} FROM (VALUES ", names.join(", ")));
        for (i, row) in rows.iter().enumerate() {
            debug_assert_eq!(row.len(), columns.len(), "one value per column");
            self.push_text(if i > 0 { ", (" } else { "(" });
            for (j, value) in row.iter().enumerate() {
                if j > 0 {
                    self.push_text(", ");
                }
                self = match value {
                    Value::Int(v) => self.int(*v),
                    Value::Text(v) => self.text(v),
                };
            }
            self.push_text(")");
        }
        self.push_text(&format!(") AS v) AS {alias}"));
        self
    }

    fn push_text(&mut self, text: &str) {
        if let Some(piece) = self.pieces.last_mut() {
            piece.push_str(text);
        }
    }

    /// After a bind: its placeholder ends the current piece of text.
    fn push_placeholder(mut self) -> Self {
        self.pieces.push(String::new());
        self
    }

    pub fn load<R>(self, conn: &mut AnyConnection) -> QueryResult<Vec<R>>
    where
        R: QueryableByName<MultiBackend> + 'static,
    {
        RunQueryDsl::load(self, conn)
    }

    pub fn execute(self, conn: &mut AnyConnection) -> QueryResult<usize> {
        RunQueryDsl::execute(self, conn)
    }

    /// The text as PostgreSQL reads it, placeholders numbered `$1`, `$2`, ….
    #[cfg(test)]
    pub fn as_text(&self) -> String {
        let mut text = String::new();
        for (n, piece) in self.pieces.iter().enumerate() {
            if n > 0 {
                text.push_str(&format!("${n}"));
            }
            text.push_str(piece);
        }
        text
    }
}

impl QueryFragment<MultiBackend> for RawSql {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
        if !self.keep_prepared || self.sized_by_a_list {
            out.unsafe_to_cache_prepared();
        }
        for (n, piece) in self.pieces.iter().enumerate() {
            out.push_sql(piece);
            match self.binds.get(n) {
                Some(Bind::Text(v)) => out.push_bind_param::<Text, _>(v)?,
                Some(Bind::BigInt(v)) => out.push_bind_param::<BigInt, _>(v)?,
                Some(Bind::Timestamp(v)) => out.push_bind_param::<Timestamp, _>(v)?,
                None => {}
            }
        }
        Ok(())
    }
}

impl QueryId for RawSql {
    type QueryId = ();
    // Not a type-keyed statement: diesel keys its cache by the text instead.
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl Query for RawSql {
    type SqlType = Untyped;
}

impl RunQueryDsl<AnyConnection> for RawSql {}

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

    #[test]
    fn only_a_list_of_one_value_keeps_the_text_fixed() {
        let one = RawSql::default().sql("SELECT 1 WHERE a IN ").int_list(&[7]);
        let two = RawSql::default()
            .sql("SELECT 1 WHERE a IN ")
            .int_list(&[7, 8]);
        let rows =
            RawSql::default()
                .sql("SELECT t.a FROM ")
                .int_rows("t", &["a"], &[vec![1], vec![2]]);
        assert!(!one.sized_by_a_list);
        assert!(two.sized_by_a_list);
        assert!(rows.sized_by_a_list);
    }
}
