use super::*;
use crate::proto::containerd::events::{ContainerCreate, TaskExit, container_create::Runtime};
use crate::proto::containerd::runc::v1::Options;
use serde_json::{Value as Json, json};

/// The rendering, parsed back for field-by-field assertions.
fn to_json(msg: &DynamicMessage) -> Json {
    serde_json::from_str(&to_json_string(msg)).unwrap()
}

fn decode(type_url: &str, msg: &impl prost::Message) -> DynamicMessage {
    let any = prost_types::Any {
        type_url: type_url.into(),
        value: msg.encode_to_vec(),
    };
    Registry::global().decode(&any).expect(type_url)
}

#[test]
fn base64_matches_rfc4648_vectors() {
    let cases = [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ];
    for (input, want) in cases {
        assert_eq!(base64(input.as_bytes()), want);
    }
    assert_eq!(base64(&[0xff, 0xfe]), "//4=");
}

#[test]
fn defaults_are_present_and_timestamps_are_rfc3339() {
    let exit = TaskExit {
        container_id: "c1".into(),
        exited_at: Some(prost_types::Timestamp {
            seconds: 1_714_557_600,
            nanos: 123_456_789,
        }),
        ..Default::default()
    };
    let got = to_json(&decode("containerd.events.TaskExit", &exit));
    let want = json!({
        "container_id": "c1", "id": "", "pid": 0, "exit_status": 0,
        "exited_at": "2024-05-01T10:00:00.123456789Z",
    });
    assert_eq!(got, want);

    let unset = to_json(&decode("containerd.events.TaskExit", &TaskExit::default()));
    assert_eq!(unset["exited_at"], Json::Null);
    assert_eq!(unset["exit_status"], json!(0));
}

#[test]
fn nested_any_known_type_is_expanded() {
    let options = Options {
        binary_name: "runc".into(),
        systemd_cgroup: true,
        ..Default::default()
    };
    let create = ContainerCreate {
        id: "c1".into(),
        image: String::new(),
        runtime: Some(Runtime {
            name: "io.containerd.runc.v2".into(),
            options: Some(prost_types::Any {
                type_url: "type.googleapis.com/containerd.runc.v1.Options".into(),
                value: options.encode_to_vec(),
            }),
        }),
    };
    let got = to_json(&decode("containerd.events.ContainerCreate", &create));
    let opts = &got["runtime"]["options"];
    assert_eq!(opts["@type"], "containerd.runc.v1.Options");
    assert_eq!(opts["binary_name"], "runc");
    assert_eq!(opts["systemd_cgroup"], true);
    assert_eq!(opts["io_uid"], 0);
    assert_eq!(got["image"], "");
}

#[test]
fn nested_any_unknown_type_keeps_bytes() {
    let create = ContainerCreate {
        id: "c1".into(),
        runtime: Some(Runtime {
            name: "io.example.v1".into(),
            options: Some(prost_types::Any {
                type_url: "example.com/Opaque".into(),
                value: b"foo".to_vec(),
            }),
        }),
        ..Default::default()
    };
    let got = to_json(&decode("containerd.events.ContainerCreate", &create));
    assert_eq!(
        got["runtime"]["options"],
        json!({"@type": "example.com/Opaque", "value": "Zm9v"})
    );
    let no_runtime = ContainerCreate::default();
    let got = to_json(&decode("containerd.events.ContainerCreate", &no_runtime));
    assert_eq!(got["runtime"], Json::Null);
}

#[test]
fn maps_repeated_and_64_bit_numbers() {
    let reg = Registry::global();
    let any = reg
        .encode_json(
            "containerd.events.ContainerUpdate",
            r#"{"id":"c1","labels":{"b":"2","a":""}}"#,
        )
        .unwrap();
    let got = to_json(&reg.decode(&any).unwrap());
    assert_eq!(got["labels"], json!({"a": "", "b": "2"}));
    assert_eq!(got["snapshot_key"], "");

    let any = reg
        .encode_json(
            "containerd.events.ContentCreate",
            r#"{"size":"9007199254740993"}"#,
        )
        .unwrap();
    let got = to_json(&reg.decode(&any).unwrap());
    assert_eq!(got["size"], json!(9_007_199_254_740_993_i64));
    assert_eq!(got["mediaType"], "");

    let any = reg
        .encode_json(
            "containerd.events.TaskCreate",
            r#"{"rootfs":[{"type":"overlay","options":["ro"]}]}"#,
        )
        .unwrap();
    let got = to_json(&reg.decode(&any).unwrap());
    assert_eq!(
        got["rootfs"],
        json!([{"type": "overlay", "source": "", "target": "", "options": ["ro"]}])
    );
    assert_eq!(got["io"], Json::Null);
}

#[test]
fn non_finite_floats_use_protojson_strings() {
    let render = |f: f64| {
        let mut out = Vec::new();
        write_float(&mut out, f);
        String::from_utf8(out).unwrap()
    };
    assert_eq!(render(f64::NAN), r#""NaN""#);
    assert_eq!(render(f64::INFINITY), r#""Infinity""#);
    assert_eq!(render(f64::NEG_INFINITY), r#""-Infinity""#);
    assert_eq!(render(1.5), "1.5");
}
