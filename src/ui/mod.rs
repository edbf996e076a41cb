//! The history UI: `/ui` on the admin listener (timeline, search, live, fleet) and the
//! same timeline picture as one self-contained file (`eventgate timeline --out`).
//! Read-only: every read goes through its own read-only connection to the audit store
//! ([`crate::query::Reader`]), with a deadline and a row cap.

pub(crate) mod document;
pub(crate) mod picture;
pub(crate) mod svg;
