//! The histogram of cursors (`cursor_counts`) checked against the members' cursors it
//! counts, straight in the database: what API tests, migration tests and crash tests assert
//! after their scenario.

/// The histogram the members' cursors make: per group and place, how many read, delivered
/// and join points are there.
const CURSORS_AS_HISTOGRAM: &str = "SELECT group_id, msg_id, sum(r), sum(d), sum(j) FROM ( \
    SELECT group_id, last_read_msg_id AS msg_id, 1 AS r, 0 AS d, 0 AS j FROM group_members \
    UNION ALL SELECT group_id, delivered_msg_id, 0, 1, 0 FROM group_members \
    UNION ALL SELECT group_id, joined_after_msg_id, 0, 0, 1 FROM group_members) AS t \
    GROUP BY group_id, msg_id";

/// The histogram kept: `cursor_counts` and the moves `MOVES` selects, summed per place.
const KEPT_HISTOGRAM: &str = "SELECT group_id, msg_id, sum(r), sum(d), sum(j) FROM ( \
    SELECT group_id, msg_id, read_members AS r, delivered_members AS d, joined_members AS j \
    FROM cursor_counts UNION ALL MOVES) AS k \
    GROUP BY group_id, msg_id HAVING sum(r) <> 0 OR sum(d) <> 0 OR sum(j) <> 0";

/// Rows where the histogram of cursors (`cursor_counts`, plus on PostgreSQL the moves not yet
/// folded) and the members' cursors themselves disagree, both ways, plus rows of the
/// histogram no cursor is at any more. Zero when the triggers and the fold kept it exact.
pub fn disagreements(conn: &mut chorus::db::AnyConnection) -> i64 {
    use diesel::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct Count {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        n: i64,
    }
    let moves = match conn {
        chorus::db::AnyConnection::Postgresql(_) => {
            "SELECT group_id, msg_id, read_members, delivered_members, joined_members \
             FROM cursor_moves"
        }
        // SQLite's triggers count straight into the histogram.
        chorus::db::AnyConnection::Sqlite(_) => {
            "SELECT 0, 0, 0, 0, 0 FROM cursor_counts WHERE 0 = 1"
        }
    };
    let kept = KEPT_HISTOGRAM.replace("MOVES", moves);
    let truth = CURSORS_AS_HISTOGRAM;
    let query = format!(
        "SELECT (SELECT count(*) FROM ({truth} EXCEPT {kept}) AS missing) \
         + (SELECT count(*) FROM ({kept} EXCEPT {truth}) AS extra) \
         + (SELECT count(*) FROM cursor_counts \
            WHERE read_members = 0 AND delivered_members = 0 AND joined_members = 0) AS n"
    );
    let counted: Vec<Count> = diesel::sql_query(query)
        .load(conn)
        .expect("compare the histogram with the cursors");
    counted.first().map_or(0, |c| c.n)
}

/// [`disagreements`] in the database at `url`, read on a connection of its own.
pub async fn disagreements_at(url: &str) -> i64 {
    let url = url.to_owned();
    tokio::task::spawn_blocking(move || {
        let settings = chorus::db::DbSettings::for_url(&url);
        let mut conn = chorus::db::connect_once(&settings).expect("open the test database");
        disagreements(&mut conn)
    })
    .await
    .expect("database check")
}
