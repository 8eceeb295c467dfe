//! SQL text fixed when the program is built, for what diesel's DSL cannot spell (correlated
//! subqueries) inside an otherwise typed query.
//!
//! diesel's own `sql()` fragment takes any string, so it marks the whole query as one not to
//! keep prepared: the connection prepares it anew on every call and PostgreSQL plans it anew
//! every time, which for a query of several joins and subqueries costs more than running it.
//! A `&'static str` is the same text on every call, so a query built with [`fixed_sql`] stays
//! prepared on each connection like any other typed query (and PostgreSQL settles on one plan
//! for it after a few calls).

use std::marker::PhantomData;

use diesel::backend::Backend;
use diesel::expression::{
    is_aggregate, AppearsOnTable, Expression, SelectableExpression, TypedExpressionType,
    ValidGrouping,
};
use diesel::query_builder::{AstPass, QueryFragment, QueryId};
use diesel::QueryResult;

/// An SQL expression of type `ST` whose text never changes.
#[derive(Debug, Clone, Copy)]
pub struct FixedSql<ST> {
    text: &'static str,
    sql_type: PhantomData<ST>,
}

/// The expression `text`, of SQL type `ST`. It must hold no bind placeholder.
pub fn fixed_sql<ST>(text: &'static str) -> FixedSql<ST> {
    FixedSql {
        text,
        sql_type: PhantomData,
    }
}

impl<ST: TypedExpressionType> Expression for FixedSql<ST> {
    type SqlType = ST;
}

impl<ST, DB: Backend> QueryFragment<DB> for FixedSql<ST> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, DB>) -> QueryResult<()> {
        out.push_sql(self.text);
        Ok(())
    }
}

/// No static id: a query holding one is told apart from others by its text, which is what
/// the connections' statement caches key such queries by.
impl<ST> QueryId for FixedSql<ST> {
    type QueryId = ();
    const HAS_STATIC_QUERY_ID: bool = false;
}

impl<ST, QS> SelectableExpression<QS> for FixedSql<ST> where FixedSql<ST>: Expression {}

impl<ST, QS> AppearsOnTable<QS> for FixedSql<ST> where FixedSql<ST>: Expression {}

impl<ST, GroupBy> ValidGrouping<GroupBy> for FixedSql<ST> {
    type IsAggregate = is_aggregate::Never;
}

#[cfg(test)]
pub(crate) mod tests {
    use diesel::dsl::sql;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;

    use super::*;
    use crate::db::MultiBackend;
    use crate::schema::groups;

    /// Whether a connection would keep `query` prepared, as PostgreSQL's builds it.
    pub fn kept<Q: QueryFragment<MultiBackend>>(query: &Q) -> bool {
        query
            .is_safe_to_cache_prepared(&MultiBackend::Postgresql(diesel::pg::Pg))
            .unwrap_or(false)
    }

    #[test]
    fn a_query_with_fixed_text_stays_prepared_where_one_with_sql_does_not() {
        let fixed = groups::table
            .select(fixed_sql::<BigInt>("(SELECT 1)"))
            .into_boxed::<MultiBackend>();
        let free = groups::table
            .select(sql::<BigInt>("(SELECT 1)"))
            .into_boxed::<MultiBackend>();
        assert!(kept(&fixed));
        assert!(!kept(&free));
    }
}
