//! Generated wire types and the registry of known event types.

#[allow(clippy::all, missing_docs)]
pub mod containerd {
    pub mod types {
        tonic::include_proto!("containerd.types");
    }
    pub mod services {
        pub mod events {
            pub mod v1 {
                tonic::include_proto!("containerd.services.events.v1");
            }
        }
    }
}

/// The encoded `FileDescriptorSet` of everything under `proto/`.
pub const DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/eventgate_descriptor.bin"));
