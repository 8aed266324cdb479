//! Names the plugin components the executors' build script built, for this crate's tests and
//! benchmarks (they install the example and test plugins): `env!("CANOPY_TEST_NOOP_WASM")`.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for (key, value) in std::env::vars() {
        if let Some(var) = key.strip_prefix("DEP_CANOPY_PLUGINS_") {
            println!("cargo:rustc-env={var}={value}");
        }
    }
}
