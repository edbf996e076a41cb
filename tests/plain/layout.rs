//! The shape of the library's source, checked: modules that import each other in a
//! large circle cannot be read, tested or changed one at a time. Every circle of
//! `src` files is at most three long (the exchange's service, routes and unary
//! calls, which are one service split for reading).

use std::process::Command;

#[test]
fn no_import_circle_is_longer_than_three_files() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new("python3")
        .arg(format!("{root}/tests/support/import_cycles.py"))
        .arg(format!("{root}/src"))
        .arg("3")
        .output()
        .expect("python3 runs tests/support/import_cycles.py");
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{report}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The checker must have seen the crate, or a wrong path would pass.
    let files: usize = report
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(files > 100, "the checker read too few files: {report}");
}
