//! `/ui/api/events` (a page of stored events, by row) and `/ui/api/event/ROW` (one).
//! Events are written as `eventgate query --format json` prints them.

use http::Response;

use crate::query::{Query, RowRange};
use crate::render;

use super::params::Params;
use super::reads::{self, ReadError, expired, too_long};
use super::{Body, Ui, UiError, json};

/// Events per page unless `limit` says otherwise, and the most it may say.
const DEFAULT_PAGE: u64 = 100;
pub(super) const MAX_PAGE: u64 = 1000;

/// The regular-expression memory a filter from the page may use: what a subscriber's
/// may (`exchange.limits.max_regex_memory`).
pub(super) fn regex_memory(ui: &Ui) -> usize {
    ui.exchange.limits().max_regex_memory.get()
}

/// `{"events":[{"row":ROW,"event":{...}}...],"next":ROW|null}`: the first `limit`
/// matching rows after `after`; `next` is the `after` of the following page, `null`
/// on the last.
pub(super) async fn events(ui: &Ui, query: &str) -> Result<Response<Body>, UiError> {
    let params = Params::parse(query);
    let mut query = params.query(regex_memory(ui))?;
    let limit = params.number("limit", DEFAULT_PAGE, MAX_PAGE)?;
    let after = params.after()?;
    // One more than the page: whether there is a next page.
    query.limit = Some(limit + 1);
    let body = reads::read(ui, move |reader, deadline| {
        let mut rows = Vec::new();
        let mut late = false;
        reader.each(
            &query,
            RowRange {
                after,
                up_to: i64::MAX,
            },
            |stored| {
                if expired(deadline) {
                    late = true;
                    return false;
                }
                rows.push(stored);
                true
            },
        )?;
        if late {
            return Err(ReadError::Ui(too_long()));
        }
        let more = rows.len() as u64 > limit;
        rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
        // Written here, on the read's low-priority thread, not on the gateway's.
        Ok(page(&rows, more))
    })
    .await?;
    Ok(json(body))
}

fn page(rows: &[crate::query::StoredEvent], more: bool) -> String {
    let mut body = String::from("{\"events\":[");
    for (i, stored) in rows.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!("{{\"row\":{},\"event\":", stored.row_id));
        body.push_str(&render::stored_event_json(
            &stored.event,
            stored.source.as_deref(),
        ));
        body.push('}');
    }
    let next = match (more, rows.last()) {
        (true, Some(last)) => last.row_id.to_string(),
        _ => "null".to_owned(),
    };
    body.push_str(&format!("],\"next\":{next}}}"));
    body
}

/// The stored event of row `ROW`, as `eventgate query --format json` prints it.
pub(super) async fn event(ui: &Ui, row: &str) -> Result<Response<Body>, UiError> {
    let row_id = row
        .parse::<i64>()
        .ok()
        .filter(|row| *row > 0)
        .ok_or_else(|| UiError::BadParam {
            param: "row",
            message: format!("{row:?} is not a row number (/ui/api/event/ROW)"),
        })?;
    let found = reads::read(ui, move |reader, _| {
        let mut found = None;
        reader.each(
            &Query::default(),
            RowRange {
                after: row_id - 1,
                up_to: row_id,
            },
            |stored| {
                found = Some(render::stored_event_json(
                    &stored.event,
                    stored.source.as_deref(),
                ));
                false
            },
        )?;
        Ok(found)
    })
    .await?;
    found
        .map(json)
        .ok_or_else(|| UiError::NotFound(format!("the audit store has no row {row_id}")))
}
