//! The layer rules of ARCHITECTURE.md, as Cargo sees them: which Canopy crate may depend on
//! which, and which crate alone links SQLite, wasmtime and axum. Cargo refuses a cycle; this test
//! refuses a dependency that points the wrong way without making one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// Each package's direct dependencies (normal and build, not dev), by name.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.toml");
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .args(["--manifest-path", manifest])
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|dep| dep["kind"].as_str() != Some("dev"))
                .map(|dep| dep["name"].as_str().unwrap().to_string())
                .collect();
            (package["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let packages = dependencies();
    let allowed: &[(&str, &[&str])] = &[
        ("canopy-shell-words", &[]),
        ("canopy-datadir", &[]),
        ("canopy-model", &["canopy-shell-words"]),
        ("canopy-store", &["canopy-model"]),
        (
            "canopy-executors",
            &["canopy-model", "canopy-store", "canopy-datadir"],
        ),
        ("canopy-client", &["canopy-model", "canopy-datadir"]),
        (
            "canopy-core",
            &["canopy-model", "canopy-store", "canopy-executors"],
        ),
        (
            "canopy-daemon",
            &[
                "canopy-core",
                "canopy-model",
                "canopy-store",
                "canopy-executors",
                "canopy-datadir",
                "canopy-client",
            ],
        ),
        (
            "canopy-tui",
            &["canopy-client", "canopy-datadir", "canopy-model"],
        ),
        (
            "canopy-cli",
            &[
                "canopy-client",
                "canopy-core",
                "canopy-daemon",
                "canopy-model",
                "canopy-datadir",
                "canopy-executors",
                "canopy-shell-words",
            ],
        ),
        // The binary wires the CLI to the TUI; the executors only hand its tests the paths of
        // the test plugins (their build script's `links` metadata reaches direct dependents).
        ("canopy", &["canopy-cli", "canopy-tui", "canopy-executors"]),
    ];
    for (name, may) in allowed {
        let deps = packages
            .get(*name)
            .unwrap_or_else(|| panic!("no package {name} in the workspace"));
        let wrong: Vec<&String> = deps
            .iter()
            .filter(|dep| dep.starts_with("canopy-") && !may.contains(&dep.as_str()))
            .collect();
        assert!(
            wrong.is_empty(),
            "{name} depends on {wrong:?}; it may depend on {may:?} (see ARCHITECTURE.md)"
        );
    }
}

#[test]
fn sqlite_wasmtime_and_axum_each_have_one_home() {
    let packages = dependencies();
    for (external, home) in [
        ("rusqlite", "canopy-store"),
        ("wasmtime", "canopy-executors"),
        ("wasmtime-wasi", "canopy-executors"),
        ("axum", "canopy-daemon"),
    ] {
        let users: Vec<&String> = packages
            .iter()
            .filter(|(_, deps)| deps.contains(external))
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            users,
            [home],
            "{external} must be a dependency of {home} alone"
        );
    }
}
