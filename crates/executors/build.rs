//! Builds Canopy's executor plugins for `wasm32-wasip2` and tells this crate where the components
//! are, so the five built-ins are embedded in the `canopy` binary by an ordinary `cargo build`.
//! The paths reach the build scripts of the crates above too (`links = "canopy-plugins"`).
//!
//! The plugins are built by a nested `cargo build` into a target dir of their own
//! (`target/wasm-plugins`), with the workspace's `plugin` profile (small, `panic = "abort"`).
//! The SDK example and the test-only plugin are built alongside so the tests can install them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// (package, env var naming its component).
const PLUGINS: &[(&str, &str)] = &[
    ("canopy-plugin-agent", "CANOPY_PLUGIN_AGENT_WASM"),
    ("canopy-plugin-command", "CANOPY_PLUGIN_COMMAND_WASM"),
    (
        "canopy-plugin-interactive",
        "CANOPY_PLUGIN_INTERACTIVE_WASM",
    ),
    (
        "canopy-plugin-docs-maintenance",
        "CANOPY_PLUGIN_DOCS_MAINTENANCE_WASM",
    ),
    ("canopy-plugin-guard", "CANOPY_PLUGIN_GUARD_WASM"),
    (
        "canopy-plugin-append-file",
        "CANOPY_EXAMPLE_APPEND_FILE_WASM",
    ),
    (
        "canopy-test-contract-v0-1",
        "CANOPY_TEST_CONTRACT_V0_1_WASM",
    ),
    ("canopy-test-hostile", "CANOPY_TEST_HOSTILE_WASM"),
    ("canopy-test-impostor", "CANOPY_TEST_IMPOSTOR_WASM"),
    ("canopy-test-noop", "CANOPY_TEST_NOOP_WASM"),
    (
        "canopy-test-slow-describe",
        "CANOPY_TEST_SLOW_DESCRIBE_WASM",
    ),
];

const TARGET: &str = "wasm32-wasip2";
const PROFILE: &str = "plugin";

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir
        .ancestors()
        .nth(2)
        .expect("crates/executors lives in the workspace")
        .to_path_buf();
    for watched in [
        "wit",
        "crates/shell-words",
        "plugin-sdk",
        "plugins",
        "tests/plugins",
        "Cargo.lock",
        "Cargo.toml",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    println!("cargo:rerun-if-env-changed=CARGO_TARGET_DIR");

    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|dir| {
            if dir.is_relative() {
                workspace.join(dir)
            } else {
                dir
            }
        })
        .unwrap_or_else(|| workspace.join("target"))
        .join("wasm-plugins");

    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&workspace)
        .args([
            "build",
            "--target",
            TARGET,
            "--profile",
            PROFILE,
            "--target-dir",
        ])
        .arg(&target_dir);
    for (package, _) in PLUGINS {
        build.args(["-p", package]);
    }
    // The outer build's settings are for the host, not for wasm guests.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_PRIMARY_PACKAGE",
    ] {
        build.env_remove(var);
    }
    let status = build
        .status()
        .unwrap_or_else(|err| panic!("cannot run cargo to build the plugins: {err}"));
    if !status.success() {
        panic!(
            "building the Canopy plugins for {TARGET} failed (see above). If the error is \
             `can't find crate for std`, install the target: `rustup target add {TARGET}`"
        );
    }

    let out = target_dir.join(TARGET).join(PROFILE);
    for (package, var) in PLUGINS {
        let file = out.join(format!("{}.wasm", package.replace('-', "_")));
        assert!(
            exists(&file),
            "the plugin build did not produce {}",
            file.display()
        );
        println!("cargo:rustc-env={var}={}", file.display());
        // To the build scripts of the crates above, as `DEP_CANOPY_PLUGINS_<VAR>`.
        println!("cargo:{var}={}", file.display());
    }
}

fn exists(path: &Path) -> bool {
    path.metadata().map(|m| m.is_file()).unwrap_or(false)
}
