//! Compiles `proto/` without a system `protoc` (protox is pure Rust), generates the
//! tonic/prost code, and keeps the descriptor set so events can be decoded by name
//! at run time.

use std::path::{Path, PathBuf};

use prost_build::{Service, ServiceGenerator};

/// The services eventgate answers itself. Every other service (containerd's
/// namespaces, containers, tasks and images, which eventgate only lists) gets a
/// client and no server, so nothing can be mistaken for an API eventgate offers.
const SERVED: &[&str] = &[
    "containerd.services.events.v1.Events",
    "eventgate.services.events.v1.Events",
];

struct ByService {
    served: Box<dyn ServiceGenerator>,
    client_only: Box<dyn ServiceGenerator>,
}

impl ServiceGenerator for ByService {
    fn generate(&mut self, service: Service, buf: &mut String) {
        let name = format!("{}.{}", service.package, service.proto_name);
        if SERVED.contains(&name.as_str()) {
            self.served.generate(service, buf);
        } else {
            self.client_only.generate(service, buf);
        }
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let mut files = Vec::new();
    collect(Path::new("proto"), &mut files)?;
    files.sort();

    let fds = protox::compile(&files, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("eventgate_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    let generator = ByService {
        served: tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .service_generator(),
        client_only: tonic_prost_build::configure()
            .build_client(true)
            .build_server(false)
            .service_generator(),
    };
    let mut config = prost_build::Config::new();
    config.out_dir(&out).service_generator(Box::new(generator));
    config.compile_fds(fds)?;
    Ok(())
}
