//! A minimal OCI image built from Debian's busybox-static, with no registry and no
//! network: one layer (`/bin/busybox`, `/bin/sh`), a config, a manifest, and an
//! index naming it, packed as an OCI layout tarball for `ctr image import`. The
//! benchmarks that run containers and the tests share it: `tests/support` compiles
//! this file itself (it depends on no other module), so the tests need no `bench`
//! feature.

use std::io;

use sha2::{Digest, Sha256};
use thiserror::Error;

/// Where Debian's busybox-static puts its binary.
pub(crate) const BUSYBOX: &str = "/bin/busybox";

fn sha256(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

fn header(path: &str, size: u64, mode: u32, kind: tar::EntryType) -> io::Result<tar::Header> {
    let mut header = tar::Header::new_gnu();
    header.set_path(path)?;
    header.set_size(size);
    header.set_mode(mode);
    header.set_entry_type(kind);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(0);
    header.set_cksum();
    Ok(header)
}

fn layer(busybox: &[u8]) -> io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.append(
        &header("bin/", 0, 0o755, tar::EntryType::Directory)?,
        &[][..],
    )?;
    tar.append(
        &header(
            "bin/busybox",
            busybox.len() as u64,
            0o755,
            tar::EntryType::Regular,
        )?,
        busybox,
    )?;
    let mut sh = header("bin/sh", 0, 0o777, tar::EntryType::Symlink)?;
    sh.set_link_name("busybox")?;
    sh.set_cksum();
    tar.append(&sh, &[][..])?;
    tar.into_inner()
}

fn oci_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

#[derive(Debug, Error)]
pub enum ImageError {
    #[error("cannot read {BUSYBOX} (install busybox-static)")]
    Read(#[source] io::Error),
    #[error("cannot build the busybox image tarball")]
    Pack(#[source] io::Error),
}

/// The OCI layout tarball of the image, named `name`.
pub(crate) fn busybox_oci_tar(name: &str) -> Result<Vec<u8>, ImageError> {
    let busybox = std::fs::read(BUSYBOX).map_err(ImageError::Read)?;
    pack(name, &busybox).map_err(ImageError::Pack)
}

fn pack(name: &str, busybox: &[u8]) -> io::Result<Vec<u8>> {
    let layer = layer(busybox)?;
    let layer_digest = sha256(&layer);
    let config = serde_json::json!({
        "architecture": oci_arch(),
        "os": "linux",
        // The default command runs until killed, as a pause container does: containerd's
        // CRI plugin runs the image with it as a pod's sandbox (tests/containerd/cri_harness.rs),
        // and a sandbox whose process exits is not ready. Everything else gives its
        // command explicitly (`ctr run IMAGE ID /bin/busybox ...`), which replaces it.
        "config": { "Entrypoint": ["/bin/busybox"], "Cmd": ["sleep", "2147483647"] },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{layer_digest}")] },
    })
    .to_string()
    .into_bytes();
    let config_digest = sha256(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": format!("sha256:{config_digest}"),
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": format!("sha256:{layer_digest}"),
            "size": layer.len(),
        }],
    })
    .to_string()
    .into_bytes();
    let manifest_digest = sha256(&manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": format!("sha256:{manifest_digest}"),
            "size": manifest.len(),
            "annotations": {
                "io.containerd.image.name": name,
                "org.opencontainers.image.ref.name": name,
            },
        }],
    })
    .to_string()
    .into_bytes();

    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |path: &str, bytes: &[u8]| -> io::Result<()> {
        tar.append(
            &header(path, bytes.len() as u64, 0o644, tar::EntryType::Regular)?,
            bytes,
        )
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#)?;
    add("index.json", &index)?;
    for (digest, bytes) in [
        (&manifest_digest, &manifest),
        (&config_digest, &config),
        (&layer_digest, &layer),
    ] {
        add(&format!("blobs/sha256/{digest}"), bytes)?;
    }
    tar.into_inner()
}
