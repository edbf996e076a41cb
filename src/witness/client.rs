//! The log's side of the tlog-witness protocol: submitting a signed checkpoint to a
//! witness with a consistency proof, and checking the cosignature it returns.
//!
//! ```text
//! let lines = add_checkpoint(url, witness_size, &proof, &note, timeout).await;
//! // Err(Conflict { size }): the witness has `size`; prove from there and retry once.
//! let time = verify_cosignature(&witness_key, &note, &lines?)?;
//! ```
//!
//! Plain HTTP/1.1 over TCP: a witness reached over the network sits behind a TLS
//! proxy, and the log reaches it through a local one (stunnel, or a sidecar), as
//! docs/history.md ("Running a witness") shows. What the witness answers is read
//! within 64 KiB and the given timeout.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use thiserror::Error;

use super::protocol::{self, MAX_BODY_BYTES, SIZE_CONTENT_TYPE};
use crate::tlog::Hash;
use crate::tlog::cosignature::{WitnessKey, cosignatures};

/// How much of a refusal's body an error quotes.
const QUOTED_BODY: usize = 1024;

/// Why a witness gave no cosignature, or none that can be used.
#[derive(Debug, Error)]
pub enum WitnessError {
    /// The URL is not `http://HOST[:PORT][/PREFIX]`.
    #[error("invalid witness URL {url:?}: {problem}")]
    Url { url: String, problem: String },
    /// 409: the witness recorded another size for this log than the old size sent
    /// (or another root for that size). Rebuild the proof from `size` and retry
    /// once; a second conflict, or a `size` the log never had, is for a human.
    #[error("the witness has recorded size {size} for this log, not the old size sent")]
    Conflict { size: u64 },
    /// Any other refusal: 400 malformed, 403 not signed by a key the witness has
    /// for the origin, 404 unknown origin, 422 the proof does not verify (a fork,
    /// as the witness sees it), 5xx.
    #[error("the witness at {url} refused the checkpoint with HTTP {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
    /// No answer: connection refused, reset, or nothing within the timeout.
    #[error("the witness at {url} could not be reached")]
    Unreachable {
        url: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An answer that is not the protocol's.
    #[error("the witness at {url} sent an unusable answer: {problem}")]
    BadResponse { url: String, problem: String },
    /// The answer holds no cosignature of the expected witness key that verifies.
    #[error("no valid cosignature by the witness {witness}: {problem}")]
    BadCosignature { witness: String, problem: String },
}

/// Submits `note` (a signed checkpoint) to the witness at `url` with the
/// consistency proof from `old_size` (the size the witness is believed to have
/// cosigned last; 0 for none, with an empty proof). Returns the cosignature lines
/// the witness sent, without their newlines, none of them checked yet: check them
/// with [`verify_cosignature`].
pub async fn add_checkpoint(
    url: &str,
    old_size: u64,
    proof: &[Hash],
    note: &str,
    timeout: Duration,
) -> Result<Vec<String>, WitnessError> {
    let (authority, target) = endpoint(url)?;
    let body = protocol::request_body(old_size, proof, note);
    let unreachable =
        |source: Box<dyn std::error::Error + Send + Sync>| WitnessError::Unreachable {
            url: url.to_owned(),
            source,
        };
    let exchange = async {
        let stream = tokio::net::TcpStream::connect(authority.as_str())
            .await
            .map_err(|e| unreachable(e.into()))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| unreachable(e.into()))?;
        tokio::spawn(connection);
        let request = http::Request::builder()
            .method(http::Method::POST)
            .uri(target.as_str())
            .header(http::header::HOST, authority.as_str())
            .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| WitnessError::Url {
                url: url.to_owned(),
                problem: e.to_string(),
            })?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| unreachable(e.into()))?;
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| WitnessError::BadResponse {
                url: url.to_owned(),
                problem: format!("reading the body: {e}"),
            })?
            .to_bytes();
        Ok::<_, WitnessError>((status, content_type, body))
    };
    let (status, content_type, body) =
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| {
                unreachable(
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("no answer within {timeout:?}"),
                    )
                    .into(),
                )
            })??;
    let bad = |problem: String| WitnessError::BadResponse {
        url: url.to_owned(),
        problem,
    };
    match status {
        200 => protocol::parse_cosignatures(&body).map_err(|e| bad(format!("200 with {e}"))),
        409 => {
            // The media type may carry parameters; its essence must be the spec's.
            let essence = content_type
                .as_deref()
                .and_then(|t| t.split(';').next())
                .map(str::trim);
            if !essence.is_some_and(|t| t.eq_ignore_ascii_case(SIZE_CONTENT_TYPE)) {
                return Err(bad(format!(
                    "409 with Content-Type {content_type:?}, not {SIZE_CONTENT_TYPE}"
                )));
            }
            let size = protocol::parse_size_body(&body)
                .map_err(|e| bad(format!("409 whose body is not a size: {e}")))?;
            Err(WitnessError::Conflict { size })
        }
        status => Err(WitnessError::Refused {
            url: url.to_owned(),
            status,
            body: quote(&body),
        }),
    }
}

/// Checks the cosignature of `witness` among `lines` (as [`add_checkpoint`]
/// returned them) on the checkpoint `note`; returns its time (Unix seconds). Lines
/// of other keys are ignored, as the spec requires; a line of this key that does
/// not verify, or none at all, is a [`WitnessError::BadCosignature`].
pub fn verify_cosignature(
    witness: &WitnessKey,
    note: &str,
    lines: &[String],
) -> Result<u64, WitnessError> {
    let bad = |problem: String| WitnessError::BadCosignature {
        witness: witness.name().to_owned(),
        problem,
    };
    let (text, _) =
        crate::note::split(note).map_err(|e| bad(format!("the checkpoint itself: {e}")))?;
    let mut cosigned = format!("{text}\n");
    for line in lines {
        cosigned.push_str(line);
        cosigned.push('\n');
    }
    let crate::tlog::cosignature::Cosignatures {
        good,
        bad: bad_names,
    } = cosignatures(&cosigned, std::slice::from_ref(witness))
        .map_err(|e| bad(format!("the cosignature lines: {e}")))?;
    if !bad_names.is_empty() {
        return Err(bad(
            "a line with its name and key id does not verify on this checkpoint".to_owned(),
        ));
    }
    match good.first() {
        Some((_, time)) => Ok(*time),
        None => Err(bad(format!(
            "none of the {} lines has its name and key id {:08x}",
            lines.len(),
            witness.key_id()
        ))),
    }
}

/// `http://HOST[:PORT][/PREFIX]` split into what to connect to and the request's
/// path (`PREFIX/add-checkpoint`).
pub(crate) fn endpoint(url: &str) -> Result<(String, String), WitnessError> {
    let invalid = |problem: &str| WitnessError::Url {
        url: url.to_owned(),
        problem: problem.to_owned(),
    };
    let uri: http::Uri = url
        .parse()
        .map_err(|_| invalid("not a URL (http://HOST[:PORT][/PREFIX])"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => {
            return Err(invalid(
                "https is not spoken here: reach the witness through a local TLS proxy \
                 (stunnel) and give its http:// address",
            ));
        }
        _ => return Err(invalid("the scheme must be http://")),
    }
    let Some(authority) = uri.authority() else {
        return Err(invalid("no host"));
    };
    if uri.query().is_some() {
        return Err(invalid("a witness URL has no query"));
    }
    let host_port = match authority.port_u16() {
        Some(_) => authority.as_str().to_owned(),
        None => format!("{}:80", authority.as_str()),
    };
    let prefix = uri.path().trim_end_matches('/');
    Ok((host_port, format!("{prefix}/add-checkpoint")))
}

fn quote(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim_end();
    match text.char_indices().nth(QUOTED_BODY) {
        Some((at, _)) => format!("{}...", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_the_address_and_the_submission_path() {
        assert_eq!(
            endpoint("http://127.0.0.1:7380").unwrap(),
            ("127.0.0.1:7380".into(), "/add-checkpoint".into())
        );
        assert_eq!(
            endpoint("http://witness.example/w1/").unwrap(),
            ("witness.example:80".into(), "/w1/add-checkpoint".into())
        );
        for (url, problem) in [
            ("https://w.example", "TLS proxy"),
            ("ftp://w.example", "http://"),
            ("w.example:7380", "http://"),
            ("http://w.example/?a=b", "query"),
            ("http:// bad", "not a URL"),
        ] {
            let error = endpoint(url).unwrap_err().to_string();
            assert!(error.contains(problem), "{url}: {error}");
        }
    }

    #[test]
    fn refusals_are_quoted_within_bounds() {
        assert_eq!(quote(b"unknown origin\n"), "unknown origin");
        let long = quote(&[b'a'; 5000]);
        assert_eq!(long.len(), QUOTED_BODY + 3);
    }
}
