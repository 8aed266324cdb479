//! Host-side bindings of the `canopy:hooks@0.1.0` WIT package (`wit/since_v0.1.0/` at the workspace root).
//!
//! One module per supported contract version; a second version would get a sibling module and
//! its own linker, chosen by the version in the component's export name.

wasmtime::component::bindgen!({
    world: "executor",
    path: "../../wit/since_v0.1.0",
    imports: { default: async },
    exports: { default: async },
});

/// The contract version these bindings implement.
pub const WIT_VERSION: &str = "0.1.0";

/// The interface every executor exports, with its version.
pub const PLUGIN_EXPORT: &str = "canopy:hooks/plugin@0.1.0";
