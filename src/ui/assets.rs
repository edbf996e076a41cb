//! The page, its script and its styles, embedded in the binary: `/ui` needs no network
//! and no files at run time. Plain HTML, one ES module and one stylesheet, no build
//! step; nothing inline, so the strict Content-Security-Policy holds.

use http::{Response, header};

use super::{Body, whole};

pub(crate) const INDEX: &str = include_str!("assets/index.html");
pub(crate) const SCRIPT: &str = include_str!("assets/app.js");
pub(crate) const STYLES: &str = include_str!("assets/app.css");

pub(super) fn index() -> Response<Body> {
    whole("text/html; charset=utf-8", INDEX)
}

pub(super) fn script() -> Response<Body> {
    cached(whole("text/javascript; charset=utf-8", SCRIPT))
}

pub(super) fn styles() -> Response<Body> {
    cached(whole("text/css; charset=utf-8", STYLES))
}

/// The script and styles change only with the binary; the page itself is never cached,
/// so a new binary's page revalidates them.
fn cached(mut response: Response<Body>) -> Response<Body> {
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        header::HeaderValue::from_static("no-cache"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_assets_stay_small_and_hold_nothing_inline() {
        assert!(INDEX.len() + SCRIPT.len() + STYLES.len() < 300 * 1024);
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
        assert!(!SCRIPT.contains("innerHTML") && !SCRIPT.contains("eval("));
    }
}
