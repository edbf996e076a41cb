//! How deep the walks over a payload go. Publishers choose every byte of a payload,
//! and an `Any` may hold another `Any` to any depth, each level decoded afresh (so
//! protobuf's own per-decode limit of 100 nested messages never adds up across them).
//! A walk without a budget let one 900 KB payload of ~36,000 nested Anys take the
//! gateway to a stack overflow through gigabytes of copies. Every recursive walk
//! (JSON rendering, `event.` filter fields) carries a [`Depth`] instead, so its stack
//! and memory stay proportional to the payload.

use prost_reflect::{Kind, MessageDescriptor};

/// Anys expanded inside Anys. containerd nests one (a container's runtime options);
/// beyond this many, an Any is kept as its type_url and base64 bytes.
pub(crate) const MAX_ANY_NESTING: u32 = 8;

/// Message levels written into one JSON rendering. containerd's event types are at
/// most four deep; a deeper message is kept as its type and base64 bytes.
pub(crate) const MAX_DEPTH: u32 = 64;

/// The budget left at one point of a walk. Copy: each branch of the walk carries
/// its own, so siblings do not share a budget, only ancestors count.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Depth {
    messages: u32,
    anys: u32,
}

impl Depth {
    /// One message level deeper, or `None` past [`MAX_DEPTH`].
    pub(super) fn enter(self) -> Option<Depth> {
        (self.messages < MAX_DEPTH).then_some(Depth {
            messages: self.messages + 1,
            ..self
        })
    }

    /// Into an Any's payload, or `None` past [`MAX_ANY_NESTING`].
    pub(super) fn enter_any(self) -> Option<Depth> {
        (self.anys < MAX_ANY_NESTING).then_some(Depth {
            anys: self.anys + 1,
            ..self
        })
    }
}

/// Values a payload may decode into: a fixed allowance plus one per
/// [`BYTES_PER_VALUE`] bytes. A decoded value costs about 150 bytes of memory (a
/// message, a string, a map entry), while the wire spends as little as 2 bytes on
/// one (an empty message in a repeated field): 400 KB of empty mounts decoded into
/// 60 MB and rendered into 30 MB of JSON. containerd's events spend 8 or more bytes
/// per value; the allowance keeps even the smallest of them decodable.
pub(super) const VALUES_ALLOWED: usize = 64;
pub(super) const BYTES_PER_VALUE: usize = 4;

/// Whether `bytes`, decoded as `desc`, stays within the value budget. One pass over
/// the wire format without allocating, guided by the descriptor (the costly values
/// are messages inside messages, which only the descriptor tells apart from
/// strings); nested Anys are not entered, their own decode checks them. Malformed
/// bytes answer `true`: the decoder itself refuses them, with its own error.
pub(super) fn within_value_budget(desc: &MessageDescriptor, bytes: &[u8]) -> bool {
    let mut budget = VALUES_ALLOWED + bytes.len() / BYTES_PER_VALUE;
    match count_values(Some(desc), bytes, &mut budget, 0) {
        Ok(_) => true,
        Err(Stop::OverBudget) => false,
        Err(Stop::Malformed) => true,
    }
}

enum Stop {
    OverBudget,
    Malformed,
}

/// protobuf's own decoding depth limit (prost refuses deeper payloads).
const WIRE_DEPTH: u32 = 100;

/// Counts the values of one message (or group: `desc` is `None` for unknown ones,
/// whose fields are kept as unknown values) and returns the bytes left after it.
fn count_values<'a>(
    desc: Option<&MessageDescriptor>,
    mut buf: &'a [u8],
    budget: &mut usize,
    depth: u32,
) -> Result<&'a [u8], Stop> {
    if depth > WIRE_DEPTH {
        return Err(Stop::Malformed);
    }
    while !buf.is_empty() {
        let key = read_varint(&mut buf)?;
        let number = u32::try_from(key >> 3).map_err(|_| Stop::Malformed)?;
        *budget = budget.checked_sub(1).ok_or(Stop::OverBudget)?;
        let field = desc.and_then(|d| d.get_field(number));
        match key & 7 {
            0 => {
                read_varint(&mut buf)?;
            }
            1 => buf = buf.get(8..).ok_or(Stop::Malformed)?,
            5 => buf = buf.get(4..).ok_or(Stop::Malformed)?,
            2 => {
                let len = usize::try_from(read_varint(&mut buf)?).map_err(|_| Stop::Malformed)?;
                let value = buf.get(..len).ok_or(Stop::Malformed)?;
                buf = &buf[len..];
                match field.as_ref().map(|f| (f.kind(), f.is_list())) {
                    Some((Kind::Message(inner), _)) => {
                        count_values(Some(&inner), value, budget, depth + 1)?;
                    }
                    // A packed list: at least one byte per element.
                    Some((kind, true)) if kind != Kind::String && kind != Kind::Bytes => {
                        *budget = budget.checked_sub(value.len()).ok_or(Stop::OverBudget)?;
                    }
                    _ => {}
                }
            }
            3 => {
                let inner = match field.as_ref().map(|f| f.kind()) {
                    Some(Kind::Message(inner)) => Some(inner),
                    _ => None,
                };
                buf = count_values(inner.as_ref(), buf, budget, depth + 1)?;
            }
            // The end of the group this call counts.
            4 => return Ok(buf),
            _ => return Err(Stop::Malformed),
        }
    }
    Ok(buf)
}

fn read_varint(buf: &mut &[u8]) -> Result<u64, Stop> {
    let mut value = 0u64;
    for shift in (0..70).step_by(7) {
        let (&byte, rest) = buf.split_first().ok_or(Stop::Malformed)?;
        *buf = rest;
        value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
        if byte < 0x80 {
            return Ok(value);
        }
    }
    Err(Stop::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_run_out_exactly_at_their_limits() {
        let mut depth = Depth::default();
        for _ in 0..MAX_DEPTH {
            depth = depth.enter().expect("within MAX_DEPTH");
        }
        assert!(depth.enter().is_none());
        let mut depth = Depth::default();
        for _ in 0..MAX_ANY_NESTING {
            depth = depth.enter_any().expect("within MAX_ANY_NESTING");
        }
        assert!(depth.enter_any().is_none());
        assert!(depth.enter().is_some(), "the two budgets are separate");
    }

    fn descriptor(name: &str) -> MessageDescriptor {
        crate::proto::Registry::global()
            .message(name)
            .expect("a registered type")
    }

    #[test]
    fn real_events_are_within_budget_and_cheap_fan_out_is_not() {
        let exit = descriptor("containerd.events.TaskExit");
        // container_id "c1", id "c1", pid 42, exit_status 3: small, always decodable.
        let small = [0x0a, 2, b'c', b'1', 0x12, 2, b'c', b'1', 0x18, 42, 0x20, 3];
        assert!(within_value_budget(&exit, &small));

        let create = descriptor("containerd.events.TaskCreate");
        let mounts = |n: usize| [0x1a, 0].repeat(n);
        assert!(within_value_budget(&create, &mounts(60)), "the allowance");
        assert!(!within_value_budget(&create, &mounts(10_000)));

        // Labels of realistic size: ~30 bytes for three values each.
        let update = descriptor("containerd.events.ContainerUpdate");
        let mut labels = Vec::new();
        for i in 0..10_000 {
            let key = format!("io.kubernetes.label-{i:05}");
            let mut entry = vec![0x0a, key.len() as u8];
            entry.extend_from_slice(key.as_bytes());
            entry.extend_from_slice(&[0x12, 3, b'y', b'e', b's']);
            labels.push(0x1a);
            labels.push(entry.len() as u8);
            labels.extend_from_slice(&entry);
        }
        assert!(within_value_budget(&update, &labels));
    }

    #[test]
    fn unknown_groups_are_counted() {
        let exit = descriptor("containerd.events.TaskExit");
        let nested = |n: usize| -> Vec<u8> {
            [0x7b]
                .repeat(n)
                .into_iter()
                .chain([0x7c].repeat(n))
                .collect()
        };
        assert!(within_value_budget(&exit, &nested(20)));
        // Deeper than protobuf's limit: refused by the decoder, not counted here.
        let deep = prost_types::Any {
            type_url: "containerd.events.TaskExit".into(),
            value: nested(5_000),
        };
        let refused = crate::proto::Registry::global().decode(&deep);
        assert!(matches!(
            refused,
            Err(crate::proto::DecodeError::Malformed { .. })
        ));
        // 100,000 empty unknown groups side by side: one value each for 2 bytes.
        assert!(!within_value_budget(&exit, &[0x7b, 0x7c].repeat(100_000)));
        // Malformed input is left to the decoder, which names the problem.
        assert!(within_value_budget(&exit, &[0x0a, 100, b'x']));
    }
}
