//! What the members' cursors add up to, kept as they move: the histogram of cursors per
//! message that receipt counts read, the unread rule, and the rows of the receipt feed.

pub mod cursor_counts;
pub mod receipts;
pub mod unread;
