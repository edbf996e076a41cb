use super::*;
use crate::proto::Registry;
use crate::proto::containerd::events::{
    ContainerCreate, ContainerUpdate, TaskCreate, TaskExit, TaskIo, container_create::Runtime,
};
use crate::proto::containerd::runc::v1::Options;
use crate::proto::containerd::services::images::v1::ImageCreate;
use crate::proto::containerd::types::Mount;
use prost::Message as _;
use prost_types::{Any, Timestamp};

fn go(type_url: &str, msg: &impl prost::Message) -> String {
    let any = Any {
        type_url: type_url.into(),
        value: msg.encode_to_vec(),
    };
    to_go_json(&Registry::global().decode(&any).expect(type_url))
}

#[test]
fn task_exit_matches_ctr_events() {
    let exit = TaskExit {
        container_id: "c1".into(),
        id: "c1".into(),
        pid: 1234,
        exit_status: 137,
        exited_at: Some(Timestamp {
            seconds: 1_714_557_600,
            nanos: 123_456_789,
        }),
    };
    assert_eq!(
        go("containerd.events.TaskExit", &exit),
        r#"{"container_id":"c1","id":"c1","pid":1234,"exit_status":137,"exited_at":{"seconds":1714557600,"nanos":123456789}}"#
    );
}

#[test]
fn zero_values_are_omitted() {
    let exit = TaskExit {
        container_id: "c1".into(),
        exited_at: Some(Timestamp {
            seconds: 1_714_557_600,
            nanos: 0,
        }),
        ..Default::default()
    };
    assert_eq!(
        go("containerd.events.TaskExit", &exit),
        r#"{"container_id":"c1","exited_at":{"seconds":1714557600}}"#
    );
    // A set but zero Timestamp is a non-nil pointer to an all-omitted struct.
    let exit = TaskExit {
        exited_at: Some(Timestamp::default()),
        ..Default::default()
    };
    assert_eq!(
        go("containerd.events.TaskExit", &exit),
        r#"{"exited_at":{}}"#
    );
    assert_eq!(go("containerd.events.TaskExit", &TaskExit::default()), "{}");
}

#[test]
fn task_create_with_rootfs_and_io() {
    let create = TaskCreate {
        container_id: "c1".into(),
        bundle: "/run/containerd/io.containerd.runtime.v2.task/default/c1".into(),
        rootfs: vec![Mount {
            r#type: "overlay".into(),
            source: "overlay".into(),
            target: String::new(),
            options: vec!["index=off".into(), "lowerdir=/a:/b".into()],
        }],
        io: Some(TaskIo {
            stdin: String::new(),
            stdout: "/run/fifo/c1-stdout".into(),
            stderr: "/run/fifo/c1-stderr".into(),
            terminal: false,
        }),
        checkpoint: String::new(),
        pid: 4321,
    };
    assert_eq!(
        go("containerd.events.TaskCreate", &create),
        concat!(
            r#"{"container_id":"c1","bundle":"/run/containerd/io.containerd.runtime.v2.task/default/c1","#,
            r#""rootfs":[{"type":"overlay","source":"overlay","options":["index=off","lowerdir=/a:/b"]}],"#,
            r#""io":{"stdout":"/run/fifo/c1-stdout","stderr":"/run/fifo/c1-stderr"},"pid":4321}"#
        )
    );
}

#[test]
fn container_create_with_runtime_options_any() {
    let options = Options {
        binary_name: "runc".into(),
        systemd_cgroup: true,
        ..Default::default()
    };
    let value = options.encode_to_vec();
    // Field 6 "runc" (0x32 0x04 ...), then field 9 true (0x48 0x01).
    assert_eq!(value, b"\x32\x04runc\x48\x01");
    let create = ContainerCreate {
        id: "c1".into(),
        image: "docker.io/library/alpine:latest".into(),
        runtime: Some(Runtime {
            name: "io.containerd.runc.v2".into(),
            options: Some(Any {
                type_url: "containerd.runc.v1.Options".into(),
                value,
            }),
        }),
    };
    assert_eq!(
        go("containerd.events.ContainerCreate", &create),
        concat!(
            r#"{"id":"c1","image":"docker.io/library/alpine:latest","runtime":{"name":"io.containerd.runc.v2","#,
            r#""options":{"type_url":"containerd.runc.v1.Options","value":"MgRydW5jSAE="}}}"#
        )
    );
}

#[test]
fn container_update_labels_are_sorted() {
    let update = ContainerUpdate {
        id: "c1".into(),
        labels: [("zeta", "1"), ("alpha", ""), ("io.cri", "x")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    };
    assert_eq!(
        go("containerd.events.ContainerUpdate", &update),
        r#"{"id":"c1","labels":{"alpha":"","io.cri":"x","zeta":"1"}}"#
    );
}

#[test]
fn image_create() {
    let image = ImageCreate {
        name: "docker.io/library/busybox:latest".into(),
        labels: [("io.cri-containerd.image".to_owned(), "managed".to_owned())].into(),
    };
    assert_eq!(
        go("containerd.services.images.v1.ImageCreate", &image),
        r#"{"name":"docker.io/library/busybox:latest","labels":{"io.cri-containerd.image":"managed"}}"#
    );
}

#[test]
fn strings_are_escaped_like_go() {
    let mut out = String::new();
    write_string(
        &mut out,
        "a<b>&c\"d\\e\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}é\u{2028}\u{2029}😀",
    );
    assert_eq!(
        out,
        r#""a\u003cb\u003e\u0026c\"d\\e\n\r\t\b\f\u0001\u001f"#.to_owned()
            + "\u{7f}é"
            + r#"\u2028\u2029"#
            + "😀\""
    );
}

#[test]
fn floats_follow_go_formatting() {
    let f64s = |f: f64| {
        let mut out = String::new();
        write_float(&mut out, f, format!("{f}"), format!("{f:e}"));
        out
    };
    assert_eq!(f64s(1.5), "1.5");
    assert_eq!(f64s(1e20), "100000000000000000000");
    assert_eq!(f64s(1e21), "1e+21");
    assert_eq!(f64s(1.5e-7), "1.5e-7");
    assert_eq!(f64s(1e-6), "0.000001");
    assert_eq!(f64s(-2.5e300), "-2.5e+300");
    assert_eq!(f64s(f64::NAN), "null");
    let f = 0.1_f32;
    let mut out = String::new();
    write_float(&mut out, f64::from(f), format!("{f}"), format!("{f:e}"));
    assert_eq!(out, "0.1");
}
