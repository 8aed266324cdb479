//! What a component says about itself before anything compiles it: the interfaces it exports
//! and imports, read from its binary with `wasmparser`. An install refuses a component that
//! is not an executor, that speaks a contract version the host does not run, or that imports
//! an interface the host does not provide, in milliseconds instead of after compiling it (an
//! 18 MB Python component takes seconds to compile).

use super::bindings::{self, Version};

/// The interfaces a component's own (outermost) import and export sections name.
#[derive(Debug, Default)]
pub(crate) struct Shape {
    pub exports: Vec<String>,
    pub imports: Vec<String>,
}

/// The WASI packages the host links for every plugin (`wasmtime_wasi::p2::add_to_linker_async`).
const WASI_PROVIDED: &[&str] = &[
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];

/// Reads a component's outermost imports and exports.
pub(crate) fn read(bytes: &[u8]) -> Result<Shape, String> {
    let mut shape = Shape::default();
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        let payload = payload.map_err(|err| format!("the component cannot be read: {err}"))?;
        match payload {
            wasmparser::Payload::ModuleSection { .. }
            | wasmparser::Payload::ComponentSection { .. } => depth += 1,
            wasmparser::Payload::End(_) => depth = depth.saturating_sub(1),
            wasmparser::Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    let import =
                        import.map_err(|err| format!("the component cannot be read: {err}"))?;
                    shape.imports.push(import.name.name.to_string());
                }
            }
            wasmparser::Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    let export =
                        export.map_err(|err| format!("the component cannot be read: {err}"))?;
                    shape.exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(shape)
}

/// The contract version a component's shape says it was built against; the error says what
/// is wrong and how to build it right.
pub(crate) fn check(shape: &Shape) -> Result<Version, String> {
    let supported = || {
        bindings::WIT_VERSIONS
            .iter()
            .map(|v| format!("canopy:hooks@{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let Some(exported) = shape
        .exports
        .iter()
        .find_map(|name| name.strip_prefix("canopy:hooks/plugin@"))
    else {
        return Err(format!(
            "the component does not export `{}`: it is not a Canopy executor (build it with canopy-plugin-sdk, or against wit/since_v0.2.0 with the `executor` world)",
            bindings::PLUGIN_EXPORT
        ));
    };
    let Some(version) = Version::parse(exported) else {
        return Err(format!(
            "the component was built against canopy:hooks@{exported}, which this Canopy does not support (it supports {})",
            supported()
        ));
    };
    for import in &shape.imports {
        if let Some(rest) = import.strip_prefix("canopy:hooks/") {
            let other = rest.split_once('@').map_or("", |(_, v)| v);
            if other != exported {
                return Err(format!(
                    "the component exports canopy:hooks@{exported} but imports canopy:hooks@{other}: build it against one version of the contract (this Canopy supports {})",
                    supported()
                ));
            }
            continue;
        }
        if WASI_PROVIDED.iter().any(|wasi| import.starts_with(wasi)) {
            continue;
        }
        let package = import.split('/').next().unwrap_or(import);
        let hint = if import.starts_with("wasi:http/") {
            " (a jco component: build it with `jco componentize ... -d http`, which leaves the HTTP client out)"
        } else {
            ""
        };
        return Err(format!(
            "the component imports `{import}`, which Canopy does not provide to plugins (it provides canopy:hooks/host and {}); build it without `{package}`{hint}",
            WASI_PROVIDED
                .iter()
                .map(|w| w.trim_end_matches('/'))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(version)
}
