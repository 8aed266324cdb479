//! Installing plugins: the checks a component must pass (a component, of the supported
//! contract, with a sane manifest, requesting only granted capabilities, clashing with no other
//! plugin's modes), the built-ins embedded in the binary, and removal of unused components.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use serde_json::Value;
use wasmtime::Engine;

use super::call::{Call, Reply};
use super::{
    LoadedPlugin, Manifest, PluginError, PluginHost, PluginInfo, PluginRecord, TemplateField,
    bindings, sha256_hex, templates_of,
};
use canopy_model::capabilities::{self, Capability};
use canopy_model::markers::Escape;
use canopy_model::time::Timestamp;

/// A built-in plugin: embedded in the binary, installed on first start with its requested
/// capabilities granted, re-installed when the binary carries a new build.
struct Builtin {
    bytes: &'static [u8],
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        bytes: include_bytes!(env!("CANOPY_PLUGIN_AGENT_WASM")),
    },
    Builtin {
        bytes: include_bytes!(env!("CANOPY_PLUGIN_COMMAND_WASM")),
    },
    Builtin {
        bytes: include_bytes!(env!("CANOPY_PLUGIN_INTERACTIVE_WASM")),
    },
    Builtin {
        bytes: include_bytes!(env!("CANOPY_PLUGIN_DOCS_MAINTENANCE_WASM")),
    },
    Builtin {
        bytes: include_bytes!(env!("CANOPY_PLUGIN_GUARD_WASM")),
    },
];

impl PluginHost {
    /// The component of a built-in plugin this binary carries, by its digest.
    pub(super) fn builtin_component(sha256: &str) -> Option<&'static [u8]> {
        BUILTINS
            .iter()
            .map(|builtin| builtin.bytes)
            .find(|bytes| sha256_hex(bytes) == sha256)
    }

    pub(super) async fn install_builtins(&self) -> anyhow::Result<()> {
        for builtin in BUILTINS {
            let sha = sha256_hex(builtin.bytes);
            let current = self
                .plugins()
                .values()
                .find(|p| p.record.builtin && p.record.sha256 == sha)
                .map(|p| p.record.name.clone());
            if current.is_some() {
                continue;
            }
            let info = self
                .install_component(builtin.bytes.to_vec(), InstallMode::Builtin, None)
                .await
                .map_err(|err| anyhow::anyhow!("cannot install a built-in plugin: {err}"))?;
            tracing::info!(plugin = %info.record.name, version = %info.record.version, "built-in plugin installed");
        }
        Ok(())
    }

    /// Installs a plugin component with the operator's grants.
    pub async fn install(
        &self,
        bytes: Vec<u8>,
        grants: &[String],
        replace: bool,
    ) -> Result<PluginInfo, PluginError> {
        self.install_gated(bytes, grants, replace, None).await
    }

    /// [`PluginHost::install`], asking `gate` (the sync hooks on `plugin.pre_install`) once
    /// the component has said who it is and its grants are checked, before anything is
    /// written; its error refuses the install.
    pub async fn install_gated(
        &self,
        bytes: Vec<u8>,
        grants: &[String],
        replace: bool,
        gate: Option<InstallGate>,
    ) -> Result<PluginInfo, PluginError> {
        let granted = capabilities::parse_list(grants)
            .map_err(|err| PluginError::Refused(format!("--grant: {err}")))?;
        self.install_component(bytes, InstallMode::Operator { granted, replace }, gate)
            .await
    }

    async fn install_component(
        &self,
        bytes: Vec<u8>,
        mode: InstallMode,
        gate: Option<InstallGate>,
    ) -> Result<PluginInfo, PluginError> {
        check_header(&bytes).map_err(PluginError::Refused)?;
        // What it imports and exports is read before anything compiles it.
        super::shape::read(&bytes)
            .and_then(|shape| super::shape::check(&shape))
            .map_err(PluginError::Refused)?;
        let sha256 = sha256_hex(&bytes);
        // Compiled, but cached only once it is installed: a refused component leaves nothing.
        let (pre, load, compiled) = self.compile(&sha256, bytes.clone()).await?;
        tracing::info!(sha256 = %&sha256[..12], source = ?load.source, micros = load.micros, "component compiled; asking it who it is");

        // Ask the component who it is, with no capability at all.
        let probe = Arc::new(LoadedPlugin {
            record: placeholder_record(&sha256),
            pre: pre.clone(),
            load,
            templates: Vec::new(),
        });
        let manifest = match self.quick_call(&probe, Call::Describe).await? {
            Reply::Manifest(manifest) => {
                manifest_from_wit(manifest).map_err(PluginError::Refused)?
            }
            Reply::Valid | Reply::Outcome(..) => {
                return Err(PluginError::Refused("describe returned no manifest".into()));
            }
        };
        let requested = capabilities::parse_list(&manifest.capabilities).map_err(|err| {
            PluginError::Refused(format!("plugin `{}` requests {err}", manifest.name))
        })?;

        let (granted, replace, builtin) = match mode {
            InstallMode::Builtin => (requested.clone(), true, true),
            InstallMode::Operator { granted, replace } => (granted, replace, false),
        };
        let missing: Vec<String> = requested
            .iter()
            .filter(|wanted| !capabilities::covers(&granted, wanted))
            .map(ToString::to_string)
            .collect();
        if !missing.is_empty() {
            return Err(PluginError::Refused(format!(
                "plugin `{}` requests capabilities that were not granted: {}; install it with {}",
                manifest.name,
                missing.join(", "),
                missing
                    .iter()
                    .map(|c| format!("--grant {c}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            )));
        }

        if let Some(gate) = gate {
            let ask = InstallAsk {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                sha256: sha256.clone(),
                modes: manifest.modes.clone(),
                capabilities: manifest.capabilities.clone(),
                granted: granted.iter().map(ToString::to_string).collect(),
            };
            gate(ask).await.map_err(PluginError::Refused)?;
        }

        // Compiling and asking the component who it is happen before the lock: a plugin whose
        // `describe` hangs runs into its own deadline without holding up anyone else's install.
        let _serialised = self.inner.install_lock.lock().await;
        // The very file already installed under its name, with the same grants: nothing to do
        // (installing it again is how a tampered copy is repaired; an intact one needs no
        // --replace for it).
        if !builtin {
            let grants: std::collections::BTreeSet<String> =
                granted.iter().map(ToString::to_string).collect();
            if let Some(existing) = self.plugins().get(&manifest.name).cloned()
                && existing.record.sha256 == sha256
                && existing.record.granted == grants
                && !existing.record.builtin
            {
                return Ok(existing.info());
            }
        }
        let displaced = self.check_conflicts(&manifest, builtin, replace)?;
        // A built-in keeps the enabled state the operator gave it, and stays disabled while an
        // operator's plugin serves one of its modes.
        let enabled = !builtin || {
            // The stored row decides (the old build may not have loaded).
            let name = manifest.name.clone();
            let was_enabled = self
                .inner
                .store
                .read(move |rd| rd.plugin(&name))
                .await
                .map_err(PluginError::from)?
                .is_none_or(|r| r.enabled);
            let plugins = self.plugins();
            let taken = plugins.values().any(|p| {
                p.record.name != manifest.name
                    && p.record.enabled
                    && p.record
                        .manifest
                        .modes
                        .iter()
                        .any(|m| manifest.modes.contains(m))
            });
            was_enabled && !taken
        };
        let record = PluginRecord {
            name: manifest.name.clone(),
            version: manifest.version.clone(),
            sha256: sha256.clone(),
            granted: granted.iter().map(ToString::to_string).collect(),
            builtin,
            enabled,
            installed_at: Timestamp::now(),
            manifest,
        };

        // The stored file is named by its digest; a file whose bytes no longer match (tampered
        // with, truncated) is rewritten, so reinstalling the good file repairs it.
        let path = self.wasm_path(&sha256);
        let intact = std::fs::read(&path).is_ok_and(|stored| sha256_hex(&stored) == sha256);
        if !intact {
            let partial = path.with_extension("wasm.partial");
            std::fs::write(&partial, &bytes)
                .with_context(|| format!("cannot write {}", partial.display()))?;
            std::fs::rename(&partial, &path)
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        let previous = self
            .plugins()
            .get(&record.name)
            .map(|p| p.record.sha256.clone());
        // The displaced plugins and the new row are written together: a crash never leaves two
        // enabled plugins serving one mode.
        let displaced_rows = displaced.clone();
        // An operator's component is kept in the database too, for the other daemons sharing
        // it; a built-in is in every canopy binary.
        let kept = (!builtin).then(|| bytes.clone());
        let record = self
            .inner
            .store
            .write(move |tx| {
                for (name, is_builtin) in &displaced_rows {
                    if *is_builtin {
                        tx.set_plugin_enabled(name, false)?;
                    } else {
                        tx.delete_plugin(name)?;
                    }
                }
                tx.put_plugin(&record)?;
                if let Some(component) = &kept {
                    tx.put_plugin_component(&record.sha256, component)?;
                }
                Ok::<_, PluginError>(record)
            })
            .await?;

        if let Some(component) = compiled {
            self.keep_compiled(component, &sha256).await;
        }
        let templates = templates_of(&record.manifest);
        let loaded = Arc::new(LoadedPlugin {
            record,
            pre,
            load,
            templates,
        });
        {
            let mut plugins = self.plugins_mut();
            for (name, is_builtin) in &displaced {
                if *is_builtin {
                    if let Some(old) = plugins.get(name) {
                        let mut record = old.record.clone();
                        record.enabled = false;
                        let disabled = LoadedPlugin {
                            record,
                            pre: old.pre.clone(),
                            load: old.load,
                            templates: old.templates.clone(),
                        };
                        plugins.insert(name.clone(), Arc::new(disabled));
                    }
                } else {
                    plugins.remove(name);
                }
            }
            plugins.insert(loaded.record.name.clone(), loaded.clone());
        }
        // Installed again: no longer one the daemon skipped at start.
        self.skipped_map().remove(&loaded.record.name);
        if let Some(old) = previous.filter(|old| *old != sha256) {
            self.forget_component(&old).await;
        }
        Ok(loaded.info())
    }

    /// Which installed plugins the new manifest clashes with; with `replace`, the ones to displace
    /// (name, builtin).
    fn check_conflicts(
        &self,
        manifest: &Manifest,
        builtin: bool,
        replace: bool,
    ) -> Result<Vec<(String, bool)>, PluginError> {
        let plugins = self.plugins();
        if let Some(existing) = plugins.get(&manifest.name) {
            if existing.record.builtin && !builtin {
                return Err(PluginError::Conflict(format!(
                    "`{}` is the name of a built-in plugin; give your plugin another name",
                    manifest.name
                )));
            }
            if !replace {
                return Err(PluginError::Conflict(format!(
                    "plugin `{}` {} is already installed; pass --replace to replace it",
                    manifest.name, existing.record.version
                )));
            }
        }
        let mut displaced = Vec::new();
        let mut clashes = Vec::new();
        for other in plugins
            .values()
            .filter(|p| p.record.name != manifest.name && p.record.enabled)
        {
            let shared: Vec<&String> = manifest
                .modes
                .iter()
                .filter(|m| other.record.manifest.modes.contains(m))
                .collect();
            if shared.is_empty() {
                continue;
            }
            if builtin && !other.record.builtin {
                // An operator's plugin took over this mode; the new built-in stays out of its way.
                continue;
            }
            clashes.push(format!(
                "{} (served by `{}`)",
                shared
                    .iter()
                    .map(|m| format!("`{m}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                other.record.name
            ));
            displaced.push((other.record.name.clone(), other.record.builtin));
        }
        if !clashes.is_empty() && !replace {
            return Err(PluginError::Conflict(format!(
                "plugin `{}` serves modes that are already served: {}; pass --replace to take them over",
                manifest.name,
                clashes.join("; ")
            )));
        }
        Ok(displaced)
    }

    /// Removes a component (and its compiled artifact) that no installed plugin uses any more.
    pub(super) async fn forget_component(&self, sha256: &str) {
        let still_used = self.plugins().values().any(|p| p.record.sha256 == sha256);
        if !still_used {
            let _ = std::fs::remove_file(self.wasm_path(sha256));
            self.inner.cache.forget(sha256).await;
        }
    }
}

enum InstallMode {
    Builtin,
    Operator {
        granted: BTreeSet<Capability>,
        replace: bool,
    },
}

/// What an install asks before it is written: the plugin, as its manifest says, and the
/// grants it is given.
#[derive(Debug, Clone)]
pub struct InstallAsk {
    pub name: String,
    pub version: String,
    pub sha256: String,
    pub modes: Vec<String>,
    /// What its manifest asks for.
    pub capabilities: Vec<String>,
    /// What the install grants.
    pub granted: Vec<String>,
}

/// Decides whether an install goes ahead; its error is the reason it does not.
pub type InstallGate = Box<
    dyn FnOnce(
            InstallAsk,
        )
            -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), String>> + Send>>
        + Send,
>;

fn placeholder_record(sha256: &str) -> PluginRecord {
    PluginRecord {
        // Its label in messages before its name is known (`component 92d2734d64b0`).
        name: format!("component {}", &sha256[..12.min(sha256.len())]),
        version: String::new(),
        sha256: sha256.to_string(),
        manifest: Manifest {
            name: String::new(),
            version: String::new(),
            modes: Vec::new(),
            capabilities: Vec::new(),
            config_schema: Value::Null,
            templates: Vec::new(),
            decides: Vec::new(),
        },
        granted: BTreeSet::new(),
        builtin: false,
        enabled: false,
        installed_at: Timestamp::now(),
    }
}

/// Checks a manifest a plugin returned and converts it.
fn manifest_from_wit(wit: bindings::canopy::hooks::types::Manifest) -> Result<Manifest, String> {
    let valid_name = |name: &str| {
        !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    };
    if !valid_name(&wit.name) {
        return Err(format!(
            "the plugin's name `{}` must be 1-64 characters of a-z, 0-9, `-`, `_`",
            wit.name
        ));
    }
    if wit.modes.is_empty() {
        return Err(format!("plugin `{}` serves no mode", wit.name));
    }
    for mode in &wit.modes {
        if !valid_name(mode) {
            return Err(format!(
                "plugin `{}`: mode `{mode}` must be 1-64 characters of a-z, 0-9, `-`, `_`",
                wit.name
            ));
        }
    }
    if let Some(stray) = wit.decides.iter().find(|m| !wit.modes.contains(m)) {
        return Err(format!(
            "plugin `{}`: mode `{stray}` is said to decide but is not one of its modes ({})",
            wit.name,
            wit.modes.join(", ")
        ));
    }
    let config_schema: Value = serde_json::from_str(&wit.config_schema)
        .map_err(|err| format!("plugin `{}`: config schema is not JSON: {err}", wit.name))?;
    Ok(Manifest {
        name: wit.name,
        version: wit.version,
        modes: wit.modes,
        capabilities: wit.capabilities,
        config_schema,
        templates: wit
            .templates
            .into_iter()
            .map(|t| TemplateField {
                field: t.field,
                escape: match t.escape {
                    bindings::canopy::hooks::types::Escape::Plain => Escape::Plain,
                    bindings::canopy::hooks::types::Escape::Shell => Escape::Shell,
                },
            })
            .collect(),
        decides: wit.decides,
    })
}

/// Refuses anything that is not a WebAssembly component, with a message that says what it is.
fn check_header(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(
            "not a WebAssembly file (it does not start with the \\0asm header)".to_string(),
        );
    }
    match &bytes[4..8] {
        [1, 0, 0, 0] => Err(
            "this is a core WebAssembly module, not a component; build the plugin for wasm32-wasip2 \
             (`cargo build --target wasm32-wasip2 --release`)"
                .to_string(),
        ),
        [_, _, 1, 0] => Ok(()),
        other => Err(format!("unsupported WebAssembly encoding (version/layer bytes {other:?})")),
    }
}

/// The version of the `canopy:hooks` contract a compiled component was built against (one
/// loaded from the cache, whose bytes were not read): the same check an install makes before
/// compiling ([`super::shape::check`]), on the compiled component's type.
pub(super) fn check_contract(
    engine: &Engine,
    component: &wasmtime::component::Component,
) -> Result<bindings::Version, String> {
    let ty = component.component_type();
    let shape = super::shape::Shape {
        exports: ty
            .exports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
        imports: ty
            .imports(engine)
            .map(|(name, _)| name.to_string())
            .collect(),
    };
    super::shape::check(&shape)
}
