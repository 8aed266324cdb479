//! The engine's one error type.

use canopy_executors::plugins::PluginError;

/// What went wrong in an engine operation. Messages say what was wrong and what is allowed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No such spec / graph / queue / run.
    #[error("no {kind} matches `{id}`")]
    NotFound { kind: &'static str, id: String },
    /// An id prefix (or a name) matches several.
    #[error("{kind} {by} `{prefix}` is ambiguous; it matches {}; {}", .candidates.join(", "), canopy_store::ids::ambiguity_hint(by))]
    Ambiguous {
        kind: &'static str,
        /// What `prefix` was taken as: `id prefix` or `name`.
        by: &'static str,
        prefix: String,
        candidates: Vec<String>,
    },
    /// Bad input; the message names the field.
    #[error("{0}")]
    Invalid(String),
    /// The request conflicts with the current state (running a running graph, say).
    #[error("{0}")]
    Conflict(String),
    /// An edit was based on a version the thing has moved on from; nothing was written.
    #[error(
        "{kind} `{name}` was edited since version {expected} (it is at version {current}); read it again and redo the edit on the current version"
    )]
    Stale {
        kind: &'static str,
        name: String,
        expected: i64,
        current: i64,
    },
    /// An executor refused a config or failed.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Storage or another internal failure.
    #[error(transparent)]
    Internal(#[from] anyhow::Error),
}

impl From<canopy_store::StoreError> for EngineError {
    fn from(err: canopy_store::StoreError) -> Self {
        use canopy_store::StoreError;
        match err {
            StoreError::NotFound { kind, id } => Self::NotFound { kind, id },
            StoreError::Ambiguous {
                kind,
                by,
                prefix,
                candidates,
            } => Self::Ambiguous {
                kind,
                by,
                prefix,
                candidates,
            },
            other => Self::Internal(other.into()),
        }
    }
}

impl From<serde_json::Error> for EngineError {
    fn from(err: serde_json::Error) -> Self {
        Self::Internal(err.into())
    }
}

/// Shorthand for `Err(EngineError::Invalid(..))`.
pub fn invalid<T>(message: impl Into<String>) -> Result<T, EngineError> {
    Err(EngineError::Invalid(message.into()))
}
