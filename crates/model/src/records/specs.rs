//! Specs: the work items of the backlog.

use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// A spec as the API returns it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, schemars::JsonSchema)]
pub struct Spec {
    pub id: String,
    pub name: String,
    pub body: String,
    pub workdir: Option<String>,
    /// One line, set when a run completes the spec.
    pub summary: Option<String>,
    /// True for a body in the older heading format: readable, to be rewritten by hand.
    pub needs_conversion: bool,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}
