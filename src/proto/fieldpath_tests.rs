use super::*;
use crate::proto::containerd::events::{
    ContainerCreate, ContainerUpdate, TaskCreate, TaskExit, TaskIo, container_create::Runtime,
};
use crate::proto::containerd::runc::v1::Options;
use crate::proto::containerd::types::Mount;
use prost_types::{Any, Timestamp};

fn pack(type_url: &str, msg: &impl prost::Message) -> Any {
    Any {
        type_url: type_url.into(),
        value: msg.encode_to_vec(),
    }
}

fn decode(type_url: &str, msg: &impl prost::Message) -> DynamicMessage {
    Registry::global()
        .decode(&pack(type_url, msg))
        .expect(type_url)
}

fn get(msg: &DynamicMessage, path: &str) -> Option<String> {
    let path: Vec<String> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('.').map(str::to_owned).collect()
    };
    event_field(msg, &path)
}

fn task_create(io: Option<TaskIo>) -> DynamicMessage {
    let create = TaskCreate {
        container_id: "c1".into(),
        bundle: String::new(),
        rootfs: vec![Mount {
            r#type: "overlay".into(),
            ..Default::default()
        }],
        io,
        checkpoint: String::new(),
        pid: 42,
    };
    decode("containerd.events.TaskCreate", &create)
}

#[test]
fn strings_are_present_only_when_non_empty() {
    let msg = task_create(None);
    assert_eq!(get(&msg, "container_id").as_deref(), Some("c1"));
    assert_eq!(get(&msg, "bundle"), None);
    assert_eq!(get(&msg, "checkpoint"), None);
    // Go ignores anything after a string field.
    assert_eq!(get(&msg, "container_id.x.y").as_deref(), Some("c1"));
}

#[test]
fn nested_messages_recurse_only_when_set() {
    let unset = task_create(None);
    assert_eq!(get(&unset, "io.stdout"), None);
    assert_eq!(get(&unset, "io.terminal"), None);

    let io = TaskIo {
        stdout: "/fifo/out".into(),
        ..Default::default()
    };
    let set = task_create(Some(io));
    assert_eq!(get(&set, "io.stdout").as_deref(), Some("/fifo/out"));
    assert_eq!(get(&set, "io.stdin"), None);
    // A bool is always present, rendered as Go's fmt.Sprint does.
    assert_eq!(get(&set, "io.terminal").as_deref(), Some("false"));
    // The path ends at the message itself: nothing to compare.
    assert_eq!(get(&set, "io"), None);
    assert_eq!(get(&set, "io.nope"), None);
}

#[test]
fn bools_render_true() {
    let io = TaskIo {
        terminal: true,
        ..Default::default()
    };
    assert_eq!(
        get(&task_create(Some(io)), "io.terminal").as_deref(),
        Some("true")
    );
}

#[test]
fn numbers_timestamps_repeated_and_unknown_are_absent() {
    let msg = task_create(None);
    assert_eq!(get(&msg, "pid"), None);
    assert_eq!(get(&msg, "rootfs"), None);
    assert_eq!(get(&msg, "rootfs.type"), None);
    assert_eq!(get(&msg, "no_such_field"), None);
    assert_eq!(
        get(&msg, "containerId"),
        None,
        "JSON names are not field paths"
    );
    assert_eq!(get(&msg, ""), None);

    let exit = TaskExit {
        container_id: "c1".into(),
        id: "exec1".into(),
        exit_status: 1,
        exited_at: Some(Timestamp {
            seconds: 5,
            nanos: 0,
        }),
        ..Default::default()
    };
    let msg = decode("containerd.events.TaskExit", &exit);
    assert_eq!(get(&msg, "id").as_deref(), Some("exec1"));
    assert_eq!(get(&msg, "exit_status"), None);
    assert_eq!(get(&msg, "exited_at"), None);
    assert_eq!(get(&msg, "exited_at.seconds"), None);
}

#[test]
fn labels_join_the_rest_of_the_path() {
    let update = ContainerUpdate {
        id: "c1".into(),
        labels: [("a.b", "dotted"), ("plain", "p"), ("empty", "")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    };
    let msg = decode("containerd.events.ContainerUpdate", &update);
    assert_eq!(get(&msg, "labels.a.b").as_deref(), Some("dotted"));
    assert_eq!(get(&msg, "labels.plain").as_deref(), Some("p"));
    // Present with an empty value: `event.labels.empty` matches, `==""` too.
    assert_eq!(get(&msg, "labels.empty").as_deref(), Some(""));
    assert_eq!(get(&msg, "labels.missing"), None);
    assert_eq!(get(&msg, "snapshot_key"), None);

    let no_labels = decode(
        "containerd.events.ContainerUpdate",
        &ContainerUpdate::default(),
    );
    assert_eq!(get(&no_labels, "labels.a"), None);

    let reg = Registry::global();
    for type_url in [
        "containerd.services.images.v1.ImageCreate",
        "containerd.events.NamespaceUpdate",
    ] {
        let any = reg
            .encode_json(type_url, r#"{"name":"n","labels":{"k":"v"}}"#)
            .unwrap();
        let msg = reg.decode(&any).unwrap();
        assert_eq!(get(&msg, "name").as_deref(), Some("n"), "{type_url}");
        assert_eq!(get(&msg, "labels.k").as_deref(), Some("v"), "{type_url}");
    }
}

fn container_create(options: Option<Any>) -> DynamicMessage {
    let create = ContainerCreate {
        id: "c1".into(),
        image: "img".into(),
        runtime: Some(Runtime {
            name: "io.containerd.runc.v2".into(),
            options,
        }),
    };
    decode("containerd.events.ContainerCreate", &create)
}

#[test]
fn nested_any_recurses_only_into_adaptor_types() {
    let runc = Options {
        binary_name: "runc".into(),
        ..Default::default()
    };
    let msg = container_create(Some(pack("containerd.runc.v1.Options", &runc)));
    assert_eq!(
        get(&msg, "runtime.name").as_deref(),
        Some("io.containerd.runc.v2")
    );
    assert_eq!(get(&msg, "runtime.options.binary_name"), None);
    assert_eq!(get(&msg, "runtime.options"), None);

    let inner = TaskExit {
        container_id: "inner".into(),
        ..Default::default()
    };
    let msg = container_create(Some(pack(
        "type.googleapis.com/containerd.events.TaskExit",
        &inner,
    )));
    assert_eq!(
        get(&msg, "runtime.options.container_id").as_deref(),
        Some("inner")
    );

    let unknown = Any {
        type_url: "example.com/Opaque".into(),
        value: vec![1],
    };
    assert_eq!(
        get(&container_create(Some(unknown)), "runtime.options.x"),
        None
    );
    assert_eq!(get(&container_create(None), "runtime.options.x"), None);

    let no_runtime = decode(
        "containerd.events.ContainerCreate",
        &ContainerCreate::default(),
    );
    assert_eq!(get(&no_runtime, "runtime.name"), None);
}

#[test]
fn types_without_adaptors_have_no_fields() {
    let runc = Options {
        binary_name: "runc".into(),
        ..Default::default()
    };
    let msg = decode("containerd.runc.v1.Options", &runc);
    assert_eq!(get(&msg, "binary_name"), None);

    // The images service's own messages share the image events' package but, as in
    // containerd, only the events have adaptors.
    let reg = Registry::global();
    let image = reg
        .encode_json(
            "containerd.services.images.v1.Image",
            r#"{"name":"n","labels":{"k":"v"}}"#,
        )
        .unwrap();
    let msg = reg.decode(&image).unwrap();
    assert_eq!(get(&msg, "name"), None);
    assert_eq!(get(&msg, "labels.k"), None);
    let listed = reg
        .encode_json(
            "containerd.services.containers.v1.Container",
            r#"{"id":"c"}"#,
        )
        .unwrap();
    assert_eq!(get(&reg.decode(&listed).unwrap(), "id"), None);
}

#[test]
fn camel_case_media_type_and_sandbox_ids() {
    let reg = Registry::global();
    let any = reg
        .encode_json(
            "containerd.events.ContentCreate",
            r#"{"digest":"sha256:ab","size":3,"mediaType":"application/json"}"#,
        )
        .unwrap();
    let msg = reg.decode(&any).unwrap();
    assert_eq!(get(&msg, "mediaType").as_deref(), Some("application/json"));
    assert_eq!(get(&msg, "size"), None);

    let any = reg
        .encode_json("containerd.events.SandboxExit", r#"{"sandbox_id":"s1"}"#)
        .unwrap();
    let msg = reg.decode(&any).unwrap();
    assert_eq!(get(&msg, "sandbox_id").as_deref(), Some("s1"));
}

#[test]
fn bytes_are_absent() {
    let desc = Registry::global()
        .message("google.protobuf.Any")
        .expect("Any is in the pool");
    let mut any = DynamicMessage::new(desc);
    any.set_field_by_name("type_url", Value::String("t".into()));
    any.set_field_by_name("value", Value::Bytes(vec![1u8].into()));
    let path = |p: &str| vec![p.to_owned()];
    assert_eq!(field(&any, &path("value"), Depth::default()), None);
    assert_eq!(
        field(&any, &path("type_url"), Depth::default()).as_deref(),
        Some("t")
    );
}
