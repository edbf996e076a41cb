//! Arbitrary envelopes and payloads never panic anything that reads them: decoding,
//! the `event.` filter fields, the JSON and `ctr events` renderings, the spool's
//! record format. Publishers control every byte of these.

use proptest::prelude::*;
use prost::Message;

use crate::event::Source;
use crate::filter::Filter;
use crate::proto::Registry;
use crate::proto::containerd::types::Envelope;
use crate::render;
use crate::testing;

/// A type URL the registry knows (so the payload bytes are really decoded), or
/// anything at all.
fn type_url() -> impl Strategy<Value = String> {
    let known: Vec<String> = Registry::global()
        .event_types()
        .into_iter()
        .map(str::to_owned)
        .collect();
    prop_oneof![
        3 => proptest::sample::select(known),
        1 => any::<String>(),
    ]
}

fn envelope() -> impl Strategy<Value = Envelope> {
    (
        proptest::option::of((any::<i64>(), any::<i32>())),
        any::<String>(),
        any::<String>(),
        proptest::option::of((type_url(), proptest::collection::vec(any::<u8>(), 0..200))),
    )
        .prop_map(|(time, namespace, topic, any)| Envelope {
            timestamp: time.map(|(seconds, nanos)| prost_types::Timestamp { seconds, nanos }),
            namespace,
            topic,
            event: any.map(|(type_url, value)| prost_types::Any { type_url, value }),
        })
}

/// Every `event.` path a filter could name for the standard types, and some none has.
const PATHS: &[&str] = &[
    "event.container_id",
    "event.id",
    "event.exit_status",
    "event.labels.a",
    "event.runtime.name",
    "event.image",
    "event.no.such.field",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_bytes_decode_to_an_envelope_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(envelope) = Envelope::decode(bytes.as_slice()) {
            read_everything(envelope);
        }
    }

    #[test]
    fn any_envelope_can_be_read_rendered_and_filtered(envelope in envelope()) {
        read_everything(envelope);
    }

    #[test]
    fn any_envelope_survives_the_spool_record_format(envelope in envelope(), seq in 1u64..u64::MAX / 2) {
        let event = testing::event(seq).source(Source::Forward).envelope(envelope).build();
        let mut buf = Vec::new();
        if crate::spool::record::encode(&event, &mut buf).is_ok() {
            let back = crate::spool::record::decode(&buf).expect("an encoded record decodes");
            prop_assert_eq!(back.seq, event.seq);
            prop_assert_eq!(back.identity.id, event.identity.id);
            prop_assert_eq!(&back.envelope, &event.envelope);
        }
    }
}

fn read_everything(envelope: Envelope) {
    let event = testing::event(1).envelope(envelope).build();
    let _ = event.payload_json();
    let _ = render::event_json(&event);
    let _ = render::event_ctr_line(&event);
    let _ = render::ctr_raw_line(&event.envelope);
    let _ = render::envelope_json(&event.envelope);
    for path in PATHS {
        let filter =
            Filter::parse(&format!("{path}==x,{path}~=\"^a\",{path}")).expect("valid filter");
        let _ = filter.matches(&event);
    }
}
