//! Specs: create, update, list.

use serde::{Deserialize, Serialize};

/// A new spec.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({
    "name": "Add a health check",
    "body": "<spec>\n<objective>\nServe GET /healthz\n</objective>\n<functional_requirements>\n- answers 200 with `ok`\n</functional_requirements>\n<non_functional_requirements>\n- answers within 10 ms\n</non_functional_requirements>\n<constraints>\n- no new dependency\n</constraints>\n<guidelines>\n- follow the router's style\n</guidelines>\n<in_scope>\n- the route and its test\n</in_scope>\n<out_of_scope>\n- metrics\n</out_of_scope>\n</spec>\n",
    "workdir": "/home/me/web"
}))]
pub struct NewSpec {
    /// The spec's name: one line, 1 to 200 characters.
    pub name: String,
    /// The spec in the tagged `<spec>` format: `<spec>` holding the seven section tags
    /// `<objective>`, `<functional_requirements>`, `<non_functional_requirements>`,
    /// `<constraints>`, `<guidelines>`, `<in_scope>`, `<out_of_scope>`, markdown inside each.
    pub body: String,
    /// Tags the spec to a workdir (an absolute path), for `spec_list`'s filter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

/// A partial update: only the fields present change.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(example = serde_json::json!({ "name": "Add a health check and a readiness check" }))]
#[schemars(example = serde_json::json!({ "workdir": null }))]
pub struct SpecPatch {
    /// A new name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A new body, in the tagged `<spec>` format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// A new workdir tag (an absolute path); `null` clears the tag.
    #[serde(
        default,
        deserialize_with = "double_option::deserialize",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Option<String>")]
    pub workdir: Option<Option<String>>,
}

impl SpecPatch {
    /// The fields the patch sets.
    pub fn fields(&self) -> Vec<String> {
        [
            ("name", self.name.is_some()),
            ("body", self.body.is_some()),
            ("workdir", self.workdir.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name.to_string())
        .collect()
    }
}

mod double_option {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(
        de: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(de).map(Some)
    }
}

/// `GET /api/specs`: which specs.
#[derive(Debug, Clone, Default, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpecQuery {
    /// Only the specs tagged to this workdir (an absolute path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_tells_a_cleared_workdir_from_an_absent_one_both_ways() {
        let cleared: SpecPatch = serde_json::from_str(r#"{"workdir": null}"#).unwrap();
        assert_eq!(cleared.workdir, Some(None));
        assert_eq!(
            serde_json::to_string(&cleared).unwrap(),
            r#"{"workdir":null}"#
        );
        let absent: SpecPatch = serde_json::from_str("{}").unwrap();
        assert_eq!(absent.workdir, None);
        assert_eq!(serde_json::to_string(&absent).unwrap(), "{}");
    }
}
