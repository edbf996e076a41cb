//! The registry's JSON writer against its first rendering, and arbitrary input
//! through everything that reads it.

mod json_equivalence;
mod props;
