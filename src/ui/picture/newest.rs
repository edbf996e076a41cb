//! The rows a picture draws: every row its query selects, or, beyond the row cap, the
//! newest `max_rows` of them: someone looking at an incident wants its end, not the
//! start of a range that holds too much.

use std::time::Instant;

use super::{DEADLINE_EVERY, PictureError, Truncated, event_ms};
use crate::query::{Query, Reader, RowRange, StoredEvent};

/// The rows to draw in store order, and how they were cut when they were.
pub(super) fn read(
    reader: &Reader,
    query: &Query,
    max_rows: u64,
    deadline: Instant,
) -> Result<(Vec<StoredEvent>, Option<Truncated>), PictureError> {
    let max_rows = max_rows.max(1);
    let all = RowRange {
        after: 0,
        up_to: reader.last_row_id()?,
    };
    // One row more than the cap tells whether there are more, without counting them.
    let first = read_rows(reader, query, all, max_rows.saturating_add(1), deadline)?;
    if first.len() as u64 <= max_rows {
        return Ok((first, None));
    }
    drop(first);
    let mut late = false;
    let cut = reader.nth_newest(query, all, max_rows, |read| {
        late = read.is_multiple_of(DEADLINE_EVERY) && Instant::now() > deadline;
        !late
    })?;
    if late || Instant::now() > deadline {
        return Err(PictureError::Deadline { rows: max_rows });
    }
    // Retention may have removed rows meanwhile; then the range's first rows are left.
    let newest = match cut {
        Some(row_id) => RowRange {
            after: row_id - 1,
            up_to: all.up_to,
        },
        None => all,
    };
    let rows = read_rows(reader, query, newest, max_rows, deadline)?;
    let drawn = rows.len() as u64;
    let total = reader.count(query, all)?;
    if Instant::now() > deadline {
        return Err(PictureError::Deadline { rows: drawn });
    }
    let from = rows.iter().map(|s| event_ms(&s.event)).min();
    let truncated = match from {
        Some(from) if total > drawn => Some(Truncated { drawn, total, from }),
        _ => None,
    };
    Ok((rows, truncated))
}

/// At most `limit` rows of `range` in store order, watching the deadline.
fn read_rows(
    reader: &Reader,
    query: &Query,
    range: RowRange,
    limit: u64,
    deadline: Instant,
) -> Result<Vec<StoredEvent>, PictureError> {
    let query = Query {
        limit: Some(limit),
        ..query.clone()
    };
    let mut rows: Vec<StoredEvent> = Vec::new();
    let mut late = false;
    reader.each(&query, range, |stored| {
        rows.push(stored);
        late = (rows.len() as u64).is_multiple_of(DEADLINE_EVERY) && Instant::now() > deadline;
        !late
    })?;
    if late || Instant::now() > deadline {
        return Err(PictureError::Deadline {
            rows: rows.len() as u64,
        });
    }
    Ok(rows)
}

#[cfg(test)]
#[path = "newest_tests.rs"]
mod tests;
