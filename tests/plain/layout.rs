//! The shape of the library's source, checked: modules that import each other in a
//! large circle cannot be read, tested or changed one at a time. Every circle of
//! `src` files is at most three long (the exchange's service, routes and unary
//! calls, which are one service split for reading). And every file's unit tests are
//! where one rule puts them, so a reader finds them without searching.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
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

/// Test-only modules that are not a file's tests: fixtures the code itself holds.
const FIXTURES: [(&str, &str); 3] = [
    ("lib.rs", "testing"),
    ("proto/mod.rs", "json_reference"),
    ("spool/mod.rs", "gate"),
];

/// Whether `path` (relative to `src`) holds tests rather than code.
fn is_test_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || path.components().any(|c| c.as_os_str() == "tests")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("src is readable").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A module declaration under `#[cfg(test)]`: its name, its `#[path]`, whether
/// inline, and whether anything but its own body follows it.
struct TestModule {
    name: String,
    path: Option<String>,
    inline: bool,
    last: bool,
}

fn test_modules(text: &str) -> Vec<TestModule> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let decl = line
            .strip_prefix("pub(crate) ")
            .or_else(|| line.strip_prefix("pub(super) "))
            .unwrap_or(line);
        let Some(rest) = decl.strip_prefix("mod ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let attributes: Vec<&str> = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.starts_with("#["))
            .copied()
            .collect();
        if !attributes.contains(&"#[cfg(test)]") {
            continue;
        }
        let path = attributes.iter().find_map(|a| {
            a.strip_prefix("#[path = \"")
                .and_then(|p| p.strip_suffix("\"]"))
                .map(str::to_owned)
        });
        let inline = rest.trim_end().ends_with('{');
        let after = &lines[i + 1..];
        let last = if inline {
            after
                .iter()
                .position(|l| *l == "}")
                .is_some_and(|end| after[end + 1..].iter().all(|l| l.trim().is_empty()))
        } else {
            after.iter().all(|l| l.trim().is_empty())
        };
        found.push(TestModule {
            name,
            path,
            inline,
            last,
        });
    }
    found
}

/// The one unit-test layout (docs/architecture.md, "Tests"): a file's unit tests
/// are its child module `tests`, declared last under `#[cfg(test)]`: inline, in
/// `<stem>_tests.rs` beside it (`#[path]`), in `tests.rs` for a `mod.rs`, or in a
/// `tests/` folder (`tests/mod.rs` and one file per topic it declares).
#[test]
fn every_file_keeps_its_unit_tests_in_one_child_module_named_tests() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let relative = |p: &Path| p.strip_prefix(&src).expect("under src").to_path_buf();
    let mut claimed: HashSet<PathBuf> = HashSet::new();
    let mut problems = Vec::new();
    let mut modules = 0;
    for file in files.iter().filter(|f| !is_test_file(&relative(f))) {
        let rel = relative(file);
        let shown = rel.display().to_string();
        let text = std::fs::read_to_string(file).expect("source is readable");
        let dir = file.parent().expect("a file has a folder");
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let folder_module = stem == "mod" || stem == "lib";
        for module in test_modules(&text) {
            if module.name != "tests" {
                if !FIXTURES.contains(&(shown.as_str(), module.name.as_str())) {
                    problems.push(format!("{shown}: test module `{}`", module.name));
                }
                continue;
            }
            modules += 1;
            if !module.last {
                problems.push(format!("{shown}: `mod tests` is not last"));
            }
            let expected = match (&module.path, module.inline) {
                (_, true) => continue,
                (Some(path), _) if *path == format!("{stem}_tests.rs") => vec![dir.join(path)],
                (Some(path), _) => {
                    problems.push(format!("{shown}: tests at {path:?}, not {stem}_tests.rs"));
                    continue;
                }
                (None, _) if folder_module => {
                    vec![dir.join("tests.rs"), dir.join("tests/mod.rs")]
                }
                (None, _) => vec![dir.join(stem).join("tests/mod.rs")],
            };
            match expected.into_iter().find(|p| p.is_file()) {
                Some(found) => {
                    claimed.insert(found);
                }
                None => problems.push(format!("{shown}: its `mod tests` file is missing")),
            }
        }
    }
    // Every test file belongs to a `mod tests`, or is a topic its `tests/mod.rs` declares.
    for file in files.iter().filter(|f| is_test_file(&relative(f))) {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = file.parent().expect("a file has a folder");
        let in_tests_folder = parent.file_name().is_some_and(|n| n == "tests");
        let belongs = if claimed.contains(file) {
            true
        } else if in_tests_folder && name != "mod.rs" {
            let topic = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
            let declared = std::fs::read_to_string(parent.join("mod.rs")).unwrap_or_default();
            claimed.contains(&parent.join("mod.rs"))
                && declared.lines().any(|l| l == format!("mod {topic};"))
        } else {
            false
        };
        if !belongs {
            problems.push(format!(
                "{}: not the tests of a file, nor a topic of a tests/mod.rs",
                relative(file).display()
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // A wrong path must not pass by finding nothing.
    assert!(modules > 100, "only {modules} test modules found under src");
}
