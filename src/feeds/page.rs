//! Reading a feed page by page: the window a read covers, and where the next read goes on.

use diesel::QueryResult;

use super::position::{FeedPosition, Window};
use crate::db::read_models::changes::{MessageRef, Watermark, WindowEnd};
use crate::db::AnyConnection;

/// One read of a feed: the items, and the cursor to continue from.
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: FeedPosition,
    pub has_more: bool,
}

/// Cuts rows of `window` fetched with `limit + 1` to a page (the extra row only says "more")
/// and finds the position to continue from: inside the same window while rows remain, else at
/// its end.
pub fn paginate<R>(
    cursor: &FeedPosition,
    window: Window,
    mut rows: Vec<R>,
    limit: i64,
    position: impl Fn(&R) -> MessageRef,
) -> Page<R> {
    let has_more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    let next = match rows.last() {
        Some(last) if has_more => FeedPosition {
            window: Some(Window {
                after: position(last),
                ..window
            }),
            ..cursor.clone()
        },
        _ => FeedPosition::at(cursor.feed, window.upto, window.upto_at),
    };
    Page {
        items: rows,
        next,
        has_more,
    }
}

/// Reads the window the next read of `cursor` covers: the one it is paging through, or
/// everything committed from its position until the read, which finds that end itself. `read`
/// gets the window's end and the position to read after; it returns the end's watermark with
/// the rows.
pub fn read_window<R>(
    conn: &mut AnyConnection,
    cursor: &FeedPosition,
    read: impl FnOnce(&mut AnyConnection, WindowEnd, MessageRef) -> QueryResult<(Watermark, Vec<R>)>,
) -> QueryResult<(Window, Vec<R>)> {
    match &cursor.window {
        Some(w) => {
            let (_, rows) = read(conn, WindowEnd::At(w.upto), w.after)?;
            Ok((w.clone(), rows))
        }
        None => {
            let start = MessageRef {
                group_id: 0,
                msg_id: 0,
            };
            // Taken before the read: the cursor's age, checked against retention, must not
            // count from later than its watermark.
            let upto_at = chrono::Utc::now().timestamp();
            let (upto, rows) = read(conn, WindowEnd::Now, start)?;
            let window = Window {
                upto,
                upto_at,
                after: start,
            };
            Ok((window, rows))
        }
    }
}
