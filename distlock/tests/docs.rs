//! Keeps the crate's front page (`docs.md`) in agreement with the
//! repository's README, which is the reference, and with the crate's own
//! `Cargo.toml` (the files are checked as text).

use std::collections::{BTreeMap, BTreeSet};

const README: &str = include_str!("../../README.md");
const DOCS: &str = include_str!("../docs.md");
const MANIFEST: &str = include_str!("../Cargo.toml");
const WORKSPACE_MANIFEST: &str = include_str!("../../Cargo.toml");
const COMPOSE: &str = include_str!("../../docker/compose.yml");
const DOCKER_README: &str = include_str!("../../docker/README.md");

/// The backends of the comparison tables, in their column order.
const BACKENDS: [&str; 5] = ["memory", "redis", "redlock", "etcd", "zk"];

/// The cells of a Markdown table line, trimmed.
fn cells(line: &str) -> Vec<String> {
    line.trim()
        .trim_matches('|')
        .split('|')
        .map(|c| c.trim().to_string())
        .collect()
}

/// The row labelled `label` of the backend comparison table in `doc`, by
/// backend: the table is the one whose header names every backend (`redis`
/// or `` `redis://` ``).
fn backend_row(doc: &str, label: &str) -> BTreeMap<String, String> {
    let lines: Vec<&str> = doc.lines().collect();
    let row = lines
        .iter()
        .position(|l| l.starts_with(&format!("| {label} |")))
        .unwrap_or_else(|| panic!("no table row {label:?}"));
    let header = (0..row)
        .rev()
        .take_while(|&i| lines[i].starts_with('|'))
        .last()
        .expect("a table header above the row");
    let names: Vec<String> = cells(lines[header])
        .iter()
        .map(|c| c.trim_matches('`').trim_end_matches("://").to_string())
        .collect();
    let values = cells(lines[row]);
    assert_eq!(names.len(), values.len(), "row {label:?}: cell count");
    let row: BTreeMap<String, String> = names.into_iter().zip(values).skip(1).collect();
    assert_eq!(
        row.keys().cloned().collect::<BTreeSet<_>>(),
        BACKENDS.iter().map(|b| b.to_string()).collect(),
        "row {label:?}: the backends"
    );
    row
}

/// The features of `distlock/Cargo.toml`'s `[features]` table, with the
/// default list apart.
fn declared_features() -> (BTreeSet<String>, BTreeSet<String>) {
    let mut in_features = false;
    let mut features = BTreeSet::new();
    let mut defaults = BTreeSet::new();
    for line in MANIFEST.lines() {
        if line.starts_with('[') {
            in_features = line.trim() == "[features]";
            continue;
        }
        if !in_features || line.starts_with([' ', '#', '"', ']']) {
            continue;
        }
        let Some((name, value)) = line.split_once(" = ") else {
            continue;
        };
        if name == "default" {
            defaults = value
                .trim_matches(['[', ']'])
                .split(',')
                .map(|f| f.trim().trim_matches('"').to_string())
                .filter(|f| !f.is_empty())
                .collect();
        } else {
            features.insert(name.to_string());
        }
    }
    (features, defaults)
}

#[test]
fn the_feature_table_names_exactly_the_declared_features() {
    let (declared, defaults) = declared_features();
    assert!(declared.contains("redis") && declared.contains("rustls-ring"));
    let mut listed = BTreeSet::new();
    let mut on_by_default = BTreeSet::new();
    let mut in_table = false;
    for line in DOCS.lines() {
        if line.starts_with("| feature | backend | URL | on by default |") {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            break;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        let row = cells(line);
        let feature = &row[0];
        if feature == "(none)" {
            continue;
        }
        let feature = feature
            .strip_prefix('`')
            .and_then(|f| f.strip_suffix('`'))
            .unwrap_or_else(|| panic!("feature cell {feature:?} is not `name`"));
        listed.insert(feature.to_string());
        match row.last().map(String::as_str) {
            Some("yes") => {
                on_by_default.insert(feature.to_string());
            }
            Some("no") => {}
            other => panic!("{feature}: on by default {other:?}"),
        }
    }
    assert_eq!(
        listed, declared,
        "docs.md's feature table against [features]"
    );
    assert_eq!(
        on_by_default, defaults,
        "docs.md's defaults against `default`"
    );
}

#[test]
fn fencing_tokens_are_described_as_in_the_readme() {
    let readme = backend_row(README, "fencing token");
    let docs = backend_row(DOCS, "fencing token");
    for backend in BACKENDS {
        assert_eq!(
            docs[backend].replace("**", ""),
            readme[backend],
            "docs.md and README.md on {backend}'s fencing token"
        );
    }
    assert!(readme["redis"].contains("server clock"));
}

/// Whether a fairness cell says waiters are served first come, first served.
fn says_fifo(cell: &str) -> bool {
    cell.contains("FIFO") && !cell.to_lowercase().contains("not fifo")
}

#[test]
fn fairness_is_described_as_in_the_readme() {
    let readme = backend_row(README, "fairness");
    let docs = backend_row(DOCS, "fairness");
    for backend in BACKENDS {
        assert_eq!(
            says_fifo(&docs[backend]),
            says_fifo(&readme[backend]),
            "docs.md and README.md on whether {backend} is FIFO: {:?} / {:?}",
            docs[backend],
            readme[backend]
        );
    }
    assert!(says_fifo(&readme["redis"]) && readme["redis"].starts_with("mutex: FIFO"));
    assert!(docs["redis"].starts_with("mutex: FIFO"));
}

#[test]
fn install_lines_agree() {
    let repository = WORKSPACE_MANIFEST
        .lines()
        .find_map(|l| l.strip_prefix("repository = "))
        .expect("the workspace declares its repository")
        .trim_matches('"');
    let version = env!("CARGO_PKG_VERSION");
    let major_minor = version.rsplit_once('.').expect("x.y.z").0;
    for (file, text) in [("README.md", README), ("docs.md", DOCS)] {
        assert!(
            text.contains(&format!("git = \"{repository}\"")),
            "{file} shows the git dependency on {repository}"
        );
        assert!(
            text.contains(&format!("version = \"{major_minor}\"")),
            "{file} shows the crates.io dependency, version {major_minor}"
        );
        assert!(
            text.contains("cargo install --path distlock-cli"),
            "{file} shows how to install the command from a checkout"
        );
        assert!(
            text.contains("`protoc`") && text.contains("protobuf-compiler"),
            "{file} says that the etcd feature needs protoc"
        );
    }
}

#[test]
fn the_docker_files_do_not_tie_redis_tokens_to_persistence() {
    for (file, text) in [
        ("docker/compose.yml", COMPOSE),
        ("docker/README.md", DOCKER_README),
    ] {
        for old in ["durable only with", "durable fencing counter"] {
            assert!(
                !text.contains(old),
                "{file} says {old:?}; README.md: Redis tokens keep increasing across restarts"
            );
        }
    }
}
