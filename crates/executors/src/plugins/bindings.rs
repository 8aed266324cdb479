//! Host-side bindings of the `canopy:hooks` contract, every version the host runs: `0.2.0`
//! (`wit/since_v0.2.0/`, the current one, which the rest of the host speaks) and `0.1.0`
//! (`wit/since_v0.1.0/`, kept exactly as released, adapted onto 0.2.0 in [`super::contract_v0_1`]).
//!
//! A component is linked against the version it was built for ([`Version::of_component`]):
//! both versions' `host` interfaces are in the one linker, and [`ExecutorPre`] holds the
//! pre-linked instance of either.

pub mod v0_1 {
    wasmtime::component::bindgen!({
        world: "executor",
        path: "../../wit/since_v0.1.0",
        imports: { default: async },
        exports: { default: async },
    });
}

pub mod v0_2 {
    wasmtime::component::bindgen!({
        world: "executor",
        path: "../../wit/since_v0.2.0",
        imports: { default: async },
        exports: { default: async },
        // The world names the WASI interfaces a guest may use; the host's are wasmtime-wasi's,
        // linked by `wasmtime_wasi::p2::add_to_linker_async`.
        with: { "wasi": wasmtime_wasi::p2::bindings },
    });
}

pub use v0_2::canopy;

use super::call::{CallState, Reply};

/// Every contract version the host runs, oldest first.
pub const WIT_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];

/// The interface every executor exports, with the current version.
pub const PLUGIN_EXPORT: &str = "canopy:hooks/plugin@0.2.0";

/// A contract version the host runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V0_1,
    V0_2,
}

impl Version {
    /// The version named `0.1.0` / `0.2.0`.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "0.1.0" => Some(Self::V0_1),
            "0.2.0" => Some(Self::V0_2),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::V0_1 => "0.1.0",
            Self::V0_2 => "0.2.0",
        }
    }
}

/// A component pre-linked against the version of the contract it was built for.
#[derive(Clone)]
pub enum ExecutorPre {
    V0_1(v0_1::ExecutorPre<CallState>),
    V0_2(v0_2::ExecutorPre<CallState>),
}

impl ExecutorPre {
    /// Checks the pre-linked instance has the exports of `version`'s executor world.
    pub fn new(
        version: Version,
        pre: wasmtime::component::InstancePre<CallState>,
    ) -> wasmtime::Result<Self> {
        Ok(match version {
            Version::V0_1 => Self::V0_1(v0_1::ExecutorPre::new(pre)?),
            Version::V0_2 => Self::V0_2(v0_2::ExecutorPre::new(pre)?),
        })
    }

    pub fn version(&self) -> Version {
        match self {
            Self::V0_1(_) => Version::V0_1,
            Self::V0_2(_) => Version::V0_2,
        }
    }

    pub fn engine(&self) -> &wasmtime::Engine {
        match self {
            Self::V0_1(pre) => pre.engine(),
            Self::V0_2(pre) => pre.engine(),
        }
    }

    /// Instantiates the component in `store` and makes `call` on it.
    pub(crate) async fn call(
        &self,
        store: &mut wasmtime::Store<CallState>,
        call: &super::call::Call,
    ) -> wasmtime::Result<Result<Reply, String>> {
        use super::call::Call;
        match self {
            Self::V0_2(pre) => {
                let instance = pre.instantiate_async(&mut *store).await?;
                let plugin = instance.canopy_hooks_plugin();
                Ok(match call {
                    Call::Describe => Ok(Reply::Manifest(plugin.call_describe(store).await?)),
                    Call::Validate { mode, config } => plugin
                        .call_validate(store, mode, config)
                        .await?
                        .map(|()| Reply::Valid),
                    Call::Execute(invocation) => plugin
                        .call_execute(store, invocation)
                        .await?
                        .map(|outcome| Reply::Outcome(outcome, Default::default())),
                })
            }
            Self::V0_1(pre) => {
                use super::contract_v0_1 as adapt;
                let instance = pre.instantiate_async(&mut *store).await?;
                let plugin = instance.canopy_hooks_plugin();
                Ok(match call {
                    Call::Describe => Ok(Reply::Manifest(adapt::manifest(
                        plugin.call_describe(store).await?,
                    ))),
                    Call::Validate { mode, config } => plugin
                        .call_validate(store, mode, config)
                        .await?
                        .map(|()| Reply::Valid),
                    Call::Execute(invocation) => plugin
                        .call_execute(store, &adapt::invocation(invocation))
                        .await?
                        .map(|outcome| Reply::Outcome(adapt::outcome(outcome), Default::default())),
                })
            }
        }
    }
}

/// Links both versions' `host` interfaces (and their types) into `linker`.
pub fn add_to_linker(linker: &mut wasmtime::component::Linker<CallState>) -> wasmtime::Result<()> {
    use wasmtime::component::HasSelf;
    // Only the `host` interface: the world's WASI imports are linked with wasmtime-wasi.
    v0_2::canopy::hooks::host::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| {
        state
    })?;
    v0_1::Executor::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    Ok(())
}
