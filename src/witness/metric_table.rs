//! The metrics `eventgate witness serve` records (served on its own listener's
//! `/metrics`).

use metrics::Unit::Count;

use crate::metric::Metric;

pub(crate) const METRICS: &[Metric] = &[
    Metric::counter(
        "eventgate_witness_requests_total",
        Count,
        "add-checkpoint requests answered by the witness, by HTTP status code: 200 cosigned, 400 malformed or an old size past the checkpoint's, 403 not signed by a configured key of the origin, 404 unknown origin, 405 not a POST, 408 body too slow, 409 old size not the recorded one (or another root for the recorded size), 413 body too large, 422 consistency proof does not verify, 500 state not readable or writable.",
    ),
    Metric::counter(
        "eventgate_witness_cosignatures_total",
        Count,
        "Checkpoints the witness cosigned (and recorded), by origin.",
    ),
    Metric::counter(
        "eventgate_witness_forks_total",
        Count,
        "Checkpoints correctly signed by a log's key that the witness refused because they contradict the one it cosigned (another root for the recorded size, or no valid consistency proof from it), by origin: the log showed two histories. The first 100 per origin are kept in the state's forks table.",
    ),
    Metric::gauge(
        "eventgate_witness_tree_size",
        Count,
        "The size of the latest checkpoint the witness cosigned, by configured origin (absent until the first).",
    ),
];
