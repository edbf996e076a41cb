//! The test image: Debian's busybox-static as an OCI layout tarball for
//! `ctr image import`, built by the same code as the benchmarks' (`bench::image`).

pub fn busybox_oci_tar(name: &str) -> Vec<u8> {
    eventgate::bench::image::busybox_oci_tar(name).unwrap_or_else(|e| {
        panic!(
            "{}; install busybox-static (tests/run.sh)",
            eventgate::errors::chain(&e)
        )
    })
}
