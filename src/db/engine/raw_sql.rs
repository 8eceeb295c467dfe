//! Raw SQL whose bind placeholders are written by the same call that binds their values, so
//! their numbers and count always agree (PostgreSQL numbers `$n` by n, SQLite by first
//! appearance: a query that introduces them out of order, or binds one too few, would read
//! the wrong values on one engine and not the other).
//!
//! A statement is prepared anew on every run unless it says [`RawSql::keep_prepared`]: then
//! each connection keeps it prepared, keyed by its text. On SQLite, parsing and planning a
//! one-row write costs more than running it.

use std::borrow::Cow;

use chrono::NaiveDateTime;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::query_dsl::RunQueryDsl;
use diesel::sql_types::{BigInt, Bool, Nullable, Text, Timestamp, Untyped};
use diesel::{QueryResult, QueryableByName};

use super::connection::{AnyConnection, MultiBackend};
use super::distribution::on_citus;

enum Bind {
    Text(String),
    BigInt(i64),
    Timestamp(NaiveDateTime),
    Bool(bool),
    MaybeText(Option<String>),
    MaybeBigInt(Option<i64>),
}

/// One value of a row of [`RawSql::rows`].
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    Int(i64),
    Text(&'a str),
}

/// A piece of a statement, in order.
enum Segment {
    Text(String),
    Bind(Bind),
    Rows(Rows),
    /// "Is one of" a list of texts (see [`RawSql::in_texts`]).
    InTexts(Column),
}

/// A table of rows written into the statement (see [`RawSql::rows`]), column by column.
struct Rows {
    alias: String,
    columns: Vec<Column>,
    /// The rows as one JSON array of arrays, bound as one text on SQLite.
    json: String,
}

struct Column {
    name: String,
    values: ColumnValues,
    /// The values as a PostgreSQL array literal, bound as one text.
    array_literal: String,
}

impl Column {
    /// Column `j` of `rows`, named `name`: texts when its first value is a text, else integers.
    fn of(name: &str, j: usize, rows: &[Vec<Value<'_>>]) -> Column {
        let values = match rows.first().and_then(|r| r.get(j)) {
            Some(Value::Text(_)) => ColumnValues::Texts(
                rows.iter()
                    .map(|r| match r.get(j) {
                        Some(Value::Text(v)) => (*v).to_owned(),
                        Some(Value::Int(v)) => v.to_string(),
                        None => String::new(),
                    })
                    .collect(),
            ),
            _ => ColumnValues::Ints(
                rows.iter()
                    .map(|r| match r.get(j) {
                        Some(Value::Int(v)) => *v,
                        _ => 0,
                    })
                    .collect(),
            ),
        };
        let array_literal = match &values {
            ColumnValues::Ints(v) => int_array(v),
            ColumnValues::Texts(v) => text_array(v),
        };
        Column {
            name: name.to_owned(),
            values,
            array_literal,
        }
    }
}

/// The rows as one JSON array of arrays, for SQLite's `json_each`.
fn rows_as_json(rows: &[Vec<Value<'_>>]) -> String {
    serde_json::Value::Array(
        rows.iter()
            .map(|row| {
                serde_json::Value::Array(
                    row.iter()
                        .map(|value| match value {
                            Value::Int(v) => serde_json::Value::from(*v),
                            Value::Text(v) => serde_json::Value::from(*v),
                        })
                        .collect(),
                )
            })
            .collect(),
    )
    .to_string()
}

enum ColumnValues {
    Ints(Vec<i64>),
    Texts(Vec<String>),
}

/// `{1,2,3}`.
fn int_array(values: &[i64]) -> String {
    let items: Vec<String> = values.iter().map(i64::to_string).collect();
    format!("{{{}}}", items.join(","))
}

/// `{"a","b\"c"}`: every element quoted, its backslashes and quotes escaped.
fn text_array(values: &[String]) -> String {
    let items: Vec<String> = values
        .iter()
        .map(|v| format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", items.join(","))
}

#[derive(Default)]
pub struct RawSql {
    segments: Vec<Segment>,
    keep_prepared: bool,
    keep_prepared_on_sqlite: bool,
    /// Holds a list of more than one value whose text varies with the list's length on
    /// every engine.
    sized_by_a_list: bool,
    /// Holds an `IN` list of more than one text: its text varies with the count on SQLite.
    sized_by_rows: bool,
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

    /// Keeps the statement prepared on each connection, unless its text varies with the
    /// length of a list ([`RawSql::int_list`] of more than one value; on SQLite also
    /// [`RawSql::in_texts`] of more than one): each length would be a text of its own, kept
    /// for the connection's lifetime. For a statement whose text is otherwise the same on
    /// every call (its values all bound).
    pub fn keep_prepared(mut self) -> Self {
        self.keep_prepared = true;
        self
    }

    /// [`RawSql::keep_prepared`] on SQLite alone, for a statement that PostgreSQL must plan
    /// for the values of each run (a plan it would keep, made for any values, may be a poor
    /// one). SQLite plans a statement for its values every time it runs it: keeping it
    /// prepared spares only the parsing.
    pub fn keep_prepared_on_sqlite(mut self) -> Self {
        self.keep_prepared_on_sqlite = true;
        self
    }

    /// Appends ` AND <column> = <the group>` to a `WHERE` clause when every row the statement
    /// touches belongs to `one_group` (see [`super::distribution::one_group`]): Citus
    /// runs a statement on one shard only when it names its distribution column's value,
    /// which it cannot see inside an array or a table of rows. Elsewhere the condition is
    /// redundant, and an index probe answers it.
    pub fn within_one_group(self, column: &str, one_group: Option<i64>) -> Self {
        match one_group {
            Some(group_id) => self.sql(&format!(" AND {column} = ")).int(group_id),
            None => self,
        }
    }

    /// Appends a placeholder for a text value and binds it.
    pub fn text(mut self, value: &str) -> Self {
        self.segments
            .push(Segment::Bind(Bind::Text(value.to_owned())));
        self
    }

    /// Appends a placeholder for an integer value and binds it.
    pub fn int(mut self, value: impl Into<i64>) -> Self {
        self.segments
            .push(Segment::Bind(Bind::BigInt(value.into())));
        self
    }

    /// Appends a placeholder for a timestamp and binds it.
    pub fn time(mut self, value: NaiveDateTime) -> Self {
        self.segments.push(Segment::Bind(Bind::Timestamp(value)));
        self
    }

    /// Appends a placeholder for a boolean and binds it.
    pub fn flag(mut self, value: bool) -> Self {
        self.segments.push(Segment::Bind(Bind::Bool(value)));
        self
    }

    /// Appends a placeholder for a text or NULL and binds it.
    pub fn maybe_text(mut self, value: Option<&str>) -> Self {
        let value = value.map(str::to_owned);
        self.segments.push(Segment::Bind(Bind::MaybeText(value)));
        self
    }

    /// Appends a placeholder for an integer or NULL and binds it.
    pub fn maybe_int(mut self, value: Option<i64>) -> Self {
        self.segments.push(Segment::Bind(Bind::MaybeBigInt(value)));
        self
    }

    /// Appends "is one of `values`" for the expression before it: on PostgreSQL `= ANY(CAST($n
    /// AS TEXT[]))`, one array bound, so the text is the same however many values there are;
    /// on SQLite `IN ($1, $2, …)`. One value, the common case, is `= $n` on both: a prepared
    /// text with an array of unknown length plans each run anew on PostgreSQL, which rates a
    /// plan fixed for any array as worse than the plan for the one it is given.
    /// `values` must not be empty.
    pub fn in_texts(mut self, values: &[&str]) -> Self {
        debug_assert!(!values.is_empty(), "an empty IN list");
        if let [one] = values {
            return self.sql(" = ").text(one);
        }
        self.sized_by_rows |= values.len() > 1;
        let values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
        self.segments.push(Segment::InTexts(Column {
            name: String::new(),
            array_literal: text_array(&values),
            values: ColumnValues::Texts(values),
        }));
        self
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

    /// Appends a table of rows named `alias` with the given `columns`, for a join in `FROM`.
    /// On PostgreSQL it is `unnest($1::BIGINT[], $2::TEXT[]) AS alias(a, b)`, one array
    /// bound per column, so the text is the same however many rows there are and the
    /// statement stays prepared. On SQLite, which has no arrays, the rows are one JSON text
    /// read by `json_each`, for the same reason. Every row has one value per column, of the
    /// same kind in every row, and there is at least one row.
    pub fn rows(mut self, alias: &str, columns: &[&str], rows: &[Vec<Value<'_>>]) -> Self {
        debug_assert!(!rows.is_empty(), "an empty table of rows");
        debug_assert!(
            rows.iter().all(|r| r.len() == columns.len()),
            "one value per column"
        );
        let columns = columns
            .iter()
            .enumerate()
            .map(|(j, name)| Column::of(name, j, rows))
            .collect();
        let json = rows_as_json(rows);
        self.segments.push(Segment::Rows(Rows {
            alias: alias.to_owned(),
            columns,
            json,
        }));
        self
    }

    fn push_text(&mut self, text: &str) {
        if let Some(Segment::Text(last)) = self.segments.last_mut() {
            last.push_str(text);
        } else {
            self.segments.push(Segment::Text(text.to_owned()));
        }
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

    /// Runs `writes` (statements run for their effect) and then this query. On PostgreSQL that is
    /// one statement, one round trip: each write a data-modifying `WITH` clause. On SQLite, which
    /// has none, and on Citus, the writes run one by one first. The query must not read what the
    /// writes write: in one PostgreSQL statement it would not see it.
    pub fn load_after<R>(self, writes: Vec<RawSql>, conn: &mut AnyConnection) -> QueryResult<Vec<R>>
    where
        R: QueryableByName<MultiBackend> + 'static,
    {
        self.after(writes, conn)?.load(conn)
    }

    /// [`RawSql::load_after`] for a statement run for its effect (on PostgreSQL an `INSERT`,
    /// `UPDATE` or `DELETE` may follow `WITH` clauses too). Neither it nor the writes may
    /// write the same rows.
    pub fn execute_after(
        self,
        writes: Vec<RawSql>,
        conn: &mut AnyConnection,
    ) -> QueryResult<usize> {
        self.after(writes, conn)?.execute(conn)
    }

    /// This statement with `writes` before it: on PostgreSQL as `WITH` clauses of one
    /// statement; on SQLite run now, one by one, leaving this statement as it is.
    fn after(self, writes: Vec<RawSql>, conn: &mut AnyConnection) -> QueryResult<RawSql> {
        if writes.is_empty() {
            return Ok(self);
        }
        // Citus plans a statement with several data-modifying clauses over distributed
        // tables clause by clause through the coordinator, and gets some of them wrong: the
        // writes run one by one there as on SQLite.
        if !matches!(conn, AnyConnection::Postgresql(_)) || on_citus(conn) {
            for write in writes {
                write.execute(conn)?;
            }
            return Ok(self);
        }
        let mut combined = RawSql {
            keep_prepared: self.keep_prepared && writes.iter().all(|w| w.keep_prepared),
            keep_prepared_on_sqlite: false,
            sized_by_a_list: self.sized_by_a_list || writes.iter().any(|w| w.sized_by_a_list),
            sized_by_rows: self.sized_by_rows || writes.iter().any(|w| w.sized_by_rows),
            ..RawSql::default()
        };
        for (n, write) in writes.into_iter().enumerate() {
            let opening = if n == 0 { "WITH" } else { "," };
            combined.push_text(&format!("{opening} write{n} AS ("));
            combined.append(write);
            combined.push_text(")");
        }
        combined.push_text(" ");
        combined.append(self);
        Ok(combined)
    }

    fn append(&mut self, other: RawSql) {
        for segment in other.segments {
            match segment {
                Segment::Text(text) => self.push_text(&text),
                other => self.segments.push(other),
            }
        }
    }

    /// The text as PostgreSQL reads it, placeholders numbered `$1`, `$2`, ….
    #[cfg(test)]
    pub fn as_text(&self) -> String {
        self.rendered(true).0
    }

    /// The text as an engine reads it, placeholders as PostgreSQL numbers them, and how many
    /// values are bound.
    #[cfg(test)]
    fn rendered(&self, postgres: bool) -> (String, usize) {
        let mut text = String::new();
        let mut binds = 0;
        self.render(postgres, |piece| match piece {
            Piece::Sql(sql) => text.push_str(&sql),
            Piece::Bind(_) | Piece::Text(_) => {
                binds += 1;
                text.push_str(&format!("${binds}"));
            }
        });
        (text, binds)
    }

    /// Walks the statement as PostgreSQL (`postgres`) or SQLite reads it, piece by piece.
    fn render<'a>(&'a self, postgres: bool, mut emit: impl FnMut(Piece<'a>)) {
        for segment in &self.segments {
            match segment {
                Segment::Text(text) => emit(Piece::Sql(Cow::Borrowed(text))),
                Segment::Bind(bind) => emit(Piece::Bind(bind)),
                Segment::Rows(rows) if postgres => rows.render_unnest(&mut emit),
                Segment::Rows(rows) => rows.render_json(&mut emit),
                Segment::InTexts(list) if postgres => {
                    emit(Piece::Sql(" = ANY(CAST(".into()));
                    emit(Piece::Text(&list.array_literal));
                    emit(Piece::Sql(" AS TEXT[]))".into()));
                }
                Segment::InTexts(list) => {
                    emit(Piece::Sql(" IN (".into()));
                    if let ColumnValues::Texts(values) = &list.values {
                        for (i, value) in values.iter().enumerate() {
                            if i > 0 {
                                emit(Piece::Sql(", ".into()));
                            }
                            emit(Piece::Text(value));
                        }
                    }
                    emit(Piece::Sql(")".into()));
                }
            }
        }
    }
}

/// One piece of a rendered statement: text, or a value to bind.
enum Piece<'a> {
    Sql(Cow<'a, str>),
    Bind(&'a Bind),
    Text(&'a String),
}

impl Rows {
    /// `unnest(CAST($1 AS BIGINT[]), CAST($2 AS TEXT[])) AS alias(a, b)`.
    fn render_unnest<'a>(&'a self, emit: &mut impl FnMut(Piece<'a>)) {
        emit(Piece::Sql("unnest(".into()));
        for (j, column) in self.columns.iter().enumerate() {
            emit(Piece::Sql(if j > 0 { ", CAST(" } else { "CAST(" }.into()));
            emit(Piece::Text(&column.array_literal));
            emit(Piece::Sql(
                match column.values {
                    ColumnValues::Ints(_) => " AS BIGINT[])",
                    ColumnValues::Texts(_) => " AS TEXT[])",
                }
                .into(),
            ));
        }
        let names: Vec<&str> = self.columns.iter().map(|c| c.name.as_str()).collect();
        emit(Piece::Sql(
            format!(") AS {}({})", self.alias, names.join(", ")).into(),
        ));
    }

    /// `(SELECT json_extract(value, '$[0]') AS a, json_extract(value, '$[1]') AS b FROM
    /// json_each($1) LIMIT -1) AS alias`: the rows bound as one JSON text, so that the
    /// statement's text is the same however many rows there are and it stays prepared.
    ///
    /// The `LIMIT -1` (no limit) keeps SQLite from flattening the subquery into the join
    /// around it: flattened, the planner rates `json_each` as cheap and puts it in the inner
    /// loop, so it parses the JSON again for every row of the other table (every entry of a
    /// group, for the repeat look-up of a batch of sends). Kept whole, the rows are read
    /// once into a temporary table and the other table is probed by its index per row.
    fn render_json<'a>(&'a self, emit: &mut impl FnMut(Piece<'a>)) {
        let names: Vec<String> = self
            .columns
            .iter()
            .enumerate()
            .map(|(j, c)| format!("json_extract(value, '$[{j}]') AS {}", c.name))
            .collect();
        emit(Piece::Sql(
            format!("(SELECT {} FROM json_each(", names.join(", ")).into(),
        ));
        emit(Piece::Text(&self.json));
        emit(Piece::Sql(format!(") LIMIT -1) AS {}", self.alias).into()));
    }
}

impl QueryFragment<MultiBackend> for RawSql {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, MultiBackend>) -> QueryResult<()> {
        let postgres = matches!(out.backend(), MultiBackend::Postgresql(_));
        let sized = self.sized_by_a_list || (self.sized_by_rows && !postgres);
        let kept = self.keep_prepared || (self.keep_prepared_on_sqlite && !postgres);
        if !kept || sized {
            out.unsafe_to_cache_prepared();
        }
        let mut result = Ok(());
        self.render(postgres, |piece| {
            if result.is_err() {
                return;
            }
            result = match piece {
                Piece::Sql(sql) => {
                    out.push_sql(&sql);
                    Ok(())
                }
                Piece::Bind(Bind::Text(v)) | Piece::Text(v) => out.push_bind_param::<Text, _>(v),
                Piece::Bind(Bind::BigInt(v)) => out.push_bind_param::<BigInt, _>(v),
                Piece::Bind(Bind::Timestamp(v)) => out.push_bind_param::<Timestamp, _>(v),
                Piece::Bind(Bind::Bool(v)) => out.push_bind_param::<Bool, _>(v),
                Piece::Bind(Bind::MaybeText(v)) => out.push_bind_param::<Nullable<Text>, _>(v),
                Piece::Bind(Bind::MaybeBigInt(v)) => out.push_bind_param::<Nullable<BigInt>, _>(v),
            };
        });
        result
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
        let expected = "SELECT 1 WHERE a = $1 AND b > $2 AND c = $3".to_owned();
        assert_eq!(q.rendered(true), (expected.clone(), 3));
        assert_eq!(q.rendered(false), (expected, 3));
    }

    #[test]
    fn rows_are_one_json_text_on_sqlite_and_one_array_per_column_on_postgres() {
        let q = RawSql::default()
            .sql("SELECT t.a FROM ")
            .int_rows("t", &["a", "b"], &[vec![1, 2], vec![3, 4]])
            .sql(" WHERE t.a IN ")
            .int_list(&[1, 3]);
        assert_eq!(
            q.rendered(false),
            (
                "SELECT t.a FROM (SELECT json_extract(value, '$[0]') AS a, \
                 json_extract(value, '$[1]') AS b FROM json_each($1) LIMIT -1) AS t WHERE t.a IN ($2, $3)"
                    .to_owned(),
                3
            )
        );
        assert_eq!(
            q.rendered(true),
            (
                "SELECT t.a FROM unnest(CAST($1 AS BIGINT[]), CAST($2 AS BIGINT[])) AS t(a, b) \
                 WHERE t.a IN ($3, $4)"
                    .to_owned(),
                4
            )
        );
    }

    #[test]
    fn text_columns_are_quoted_array_elements() {
        let rows = vec![
            vec![Value::Int(1), Value::Text("plain")],
            vec![Value::Int(2), Value::Text(r#"a "quoted" \ back,slash {}"#)],
        ];
        let q = RawSql::default().rows("t", &["g", "k"], &rows);
        let Some(Segment::Rows(table)) = q.segments.first() else {
            panic!("a table of rows");
        };
        assert_eq!(table.columns[0].array_literal, "{1,2}");
        assert_eq!(
            table.columns[1].array_literal,
            r#"{"plain","a \"quoted\" \\ back,slash {}"}"#
        );
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
        assert!(!rows.sized_by_rows && !rows.sized_by_a_list);
    }
}
