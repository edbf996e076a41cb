//! `/ui/api/timeline.svg` and `/ui/api/timeline.html`: the timeline picture
//! ([`super::picture`]) of the view's parameters, as the SVG the page imports or as
//! the self-contained file `eventgate timeline --out` writes, for download.

use http::{Response, header};

use crate::query::pods::{PodLookup, PodName};
use crate::query::{Query, Reader};

use super::api::regex_memory;
use super::params::Params;
use super::picture::{self, Group, Picture, PictureError, PictureQuery};
use super::reads::{self, ReadError, too_long};
use super::{Body, Ui, UiError, document, svg, whole};

/// Events drawn at most in one picture; beyond, the newest are drawn and the picture says so.
pub(crate) const MAX_ROWS: u64 = 20_000;

pub(super) async fn svg(ui: &Ui, query: &str) -> Result<Response<Body>, UiError> {
    let text = picture(ui, query, |picture, _| svg::render(picture)).await?;
    Ok(whole("image/svg+xml; charset=utf-8", text))
}

pub(super) async fn html(ui: &Ui, query: &str) -> Result<Response<Body>, UiError> {
    let text = picture(ui, query, document::render).await?;
    let mut response = whole("text/html; charset=utf-8", text);
    response.headers_mut().insert(
        header::CONTENT_DISPOSITION,
        header::HeaderValue::from_static("attachment; filename=\"eventgate-timeline.html\""),
    );
    Ok(response)
}

/// The picture of the parameters, drawn by `draw` (given a title saying what it
/// shows) on the read's own low-priority thread: drawing 20,000 marks is work too.
async fn picture(
    ui: &Ui,
    query: &str,
    draw: fn(&Picture, &str) -> String,
) -> Result<String, UiError> {
    let params = Params::parse(query);
    let query = params.query_without_pod(regex_memory(ui))?;
    if let (Some(since), Some(until)) = (query.since, query.until)
        && since >= until
    {
        return Err(UiError::BadParam {
            param: "until",
            message: "the time range is empty: since must come before until".to_owned(),
        });
    }
    let group = match params.get("group") {
        None => Group::default(),
        Some(text) => text
            .trim()
            .parse::<Group>()
            .map_err(|message| UiError::BadParam {
                param: "group",
                message,
            })?,
    };
    let pod = params.pod();
    let filters = params.all("filter");
    let title = match &pod {
        Some(pod) if pod.namespace.is_empty() => format!("pod {}", pod.name),
        Some(pod) => format!("pod {pod}"),
        None if filters.is_empty() => "all events".to_owned(),
        None => filters.join(" or "),
    };
    reads::read(ui, move |reader, deadline| {
        let pod = match pod {
            Some(pod) if pod.namespace.is_empty() => Some(resolve(reader, pod.name, &query)?),
            pod => pod,
        };
        let request = PictureQuery {
            query,
            pod,
            group,
            max_rows: MAX_ROWS,
            deadline,
        };
        let picture = picture::build(reader, &request).map_err(|error| match error {
            PictureError::BadInput(message) => ReadError::Ui(UiError::BadParam {
                param: "filter",
                message,
            }),
            PictureError::Deadline { .. } => ReadError::Ui(too_long()),
            PictureError::Store(error) => ReadError::Query(error),
        })?;
        Ok(draw(&picture, &title))
    })
    .await
}

/// The namespace of a pod named without one, as `eventgate timeline --pod` finds it:
/// the only namespace with a pod of that name among the rows the view selects.
fn resolve(reader: &Reader, name: String, query: &Query) -> Result<PodName, ReadError> {
    let refuse = |message: String| {
        ReadError::Ui(UiError::BadParam {
            param: "pod",
            message,
        })
    };
    match reader.lookup_pod(&name, query)? {
        PodLookup::Found(pod) => Ok(pod),
        PodLookup::Missing => Err(refuse(format!(
            "no stored event of a pod named {name:?} matches the filter and time range"
        ))),
        PodLookup::Ambiguous { namespaces, list } => Err(refuse(format!(
            "pods named {name:?} are in {namespaces} namespaces: {list}; name one with ns"
        ))),
    }
}
