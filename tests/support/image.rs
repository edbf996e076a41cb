//! The test image: Debian's busybox-static as an OCI layout tarball for
//! `ctr image import`, built by the same code as the benchmarks' (`bench::image`),
//! compiled here so the tests need no `bench` feature.

#[path = "../../src/bench/image.rs"]
mod oci;

pub fn busybox_oci_tar(name: &str) -> Vec<u8> {
    oci::busybox_oci_tar(name).unwrap_or_else(|e| {
        panic!(
            "{}; install busybox-static (tests/run.sh)",
            eventgate::errors::chain(&e)
        )
    })
}
