//! Generated wire types, the registry of known event types, and the renderings of
//! decoded events that other tools and people expect: containerd's `event.` filter
//! fields, `ctr events` output, and a lossless JSON for storage.

mod fieldpath;
mod from_json;
mod go;
mod json;
#[cfg(test)]
pub(crate) mod json_reference;
mod limits;
mod registry;
mod time;

use prost_reflect::{FieldDescriptor, MessageDescriptor};

pub(crate) use fieldpath::{event_field, has_adaptor};
pub(crate) use from_json::encode_json_value;
pub(crate) use go::to_go_json;
pub(crate) use json::to_json_string;
#[cfg(test)]
pub(crate) use registry::STANDARD_EVENTS;
pub use registry::{DecodeError, EncodeError, Registry};
pub(crate) use time::{go_time_string, rfc3339_nanos};

#[allow(clippy::all, missing_docs)]
pub mod containerd {
    pub mod types {
        tonic::include_proto!("containerd.types");
    }
    /// `containerd.v1.types`: a task's process as the tasks service lists it.
    pub mod v1 {
        pub mod types {
            tonic::include_proto!("containerd.v1.types");
        }
    }
    pub mod events {
        tonic::include_proto!("containerd.events");
    }
    pub mod services {
        pub mod events {
            pub mod v1 {
                tonic::include_proto!("containerd.services.events.v1");
            }
        }
        /// The image events and the images service share this package, as in containerd.
        pub mod images {
            pub mod v1 {
                tonic::include_proto!("containerd.services.images.v1");
            }
        }
        pub mod namespaces {
            pub mod v1 {
                tonic::include_proto!("containerd.services.namespaces.v1");
            }
        }
        pub mod containers {
            pub mod v1 {
                tonic::include_proto!("containerd.services.containers.v1");
            }
        }
        pub mod tasks {
            pub mod v1 {
                tonic::include_proto!("containerd.services.tasks.v1");
            }
        }
    }
    pub mod runc {
        pub mod v1 {
            tonic::include_proto!("containerd.runc.v1");
        }
    }
}

/// eventgate's own events (gap markers), emitted in namespace `eventgate`.
#[allow(clippy::all, missing_docs)]
pub mod eventgate {
    pub mod events {
        pub mod v1 {
            tonic::include_proto!("eventgate.events.v1");
        }
    }
    /// eventgate's resumable Subscribe (`eventgate events --since`).
    pub mod services {
        pub mod events {
            pub mod v1 {
                tonic::include_proto!("eventgate.services.events.v1");
            }
        }
    }
}

/// Kubernetes' CRI (`runtime.v1`, a subset: `proto/k8s/runtime/v1/api.proto`), a
/// client only, with which the tests drive containerd's CRI plugin as the kubelet
/// does. None of its messages is an event.
#[allow(clippy::all, missing_docs)]
pub mod runtime {
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}

/// The encoded `FileDescriptorSet` of everything under `proto/`.
pub(crate) const DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/eventgate_descriptor.bin"));

/// Fields in `.proto` declaration order, which is the order Go's generated structs
/// (and so `encoding/json`) use; prost-reflect iterates by field number instead.
fn declared_fields(desc: &MessageDescriptor) -> Vec<FieldDescriptor> {
    desc.descriptor_proto()
        .field
        .iter()
        .filter_map(|f| desc.get_field_by_name(f.name()))
        .collect()
}

#[cfg(test)]
mod tests;
