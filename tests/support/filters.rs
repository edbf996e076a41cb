//! The costliest subscriptions the exchange's default limits let in, as the hostile
//! client tests hold them.

/// `exchange.limits.max_filters`'s default.
pub const MAX_FILTERS: usize = 64;

/// One of the costliest filters the default limits allow: a `~=` expression of
/// alternatives of character classes that topics never match (so every filter of
/// the subscription is tried on every event), as large as the subscription's share
/// of `max_regex_memory` (8 MiB for 64 expressions: 128 KiB each, 64 KiB of which is
/// its matching cache) lets it be. Its text is far under `max_filter_bytes`
/// (4096): the compiled size binds first.
pub fn heavy_filter(i: usize) -> String {
    let alternatives: Vec<String> = (0..150)
        .map(|k| {
            format!(
                "[a-z/]{{{}}}{}",
                (k + i) % 7 + 1,
                (b'a' + (k % 26) as u8) as char
            )
        })
        .collect();
    format!("topic~=\"(?:{})+/{{3}}\"", alternatives.join("|"))
}
