//! Project events: a configured project's checkout moving to a new commit, a new tag
//! appearing in it. Project hooks (`[projects.NAME.hooks]`) run on them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Family, declare_events};

/// `project.checkout_updated`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckoutUpdated {
    /// The project's name in `canopy.toml`.
    pub project_name: String,
    /// The checkout's path (the project's workdir).
    pub checkout: String,
    /// The commit HEAD now points at.
    pub commit_sha: String,
    /// The commit it pointed at before.
    pub previous_sha: Option<String>,
    /// The branch checked out, when HEAD is on one.
    pub branch: Option<String>,
}

/// `project.tag_pushed`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TagPushed {
    pub project_name: String,
    pub checkout: String,
    /// The new tag's name.
    pub tag: String,
    /// The commit it points at.
    pub commit_sha: String,
}

declare_events! { Family::Project;
    CheckoutUpdated => "project.checkout_updated", false,
        "a project's checkout moved to a new commit",
        ["project_name", "checkout", "commit_sha", "previous_sha", "branch"],
        target: |e| Some(e.project_name.clone()), project: |e| Some(e.checkout.clone());
    TagPushed => "project.tag_pushed", false,
        "a new tag appeared in a project's checkout",
        ["project_name", "checkout", "tag", "commit_sha"],
        target: |e| Some(e.project_name.clone()), project: |e| Some(e.checkout.clone());
}
