//! Which daemon this is: its node name and roles. Daemon hooks and crons name the nodes
//! (`nodes`) and roles (`roles_permitted`) they run on, webhooks the nodes that serve them;
//! each checks itself against this daemon's [`Identity`].

/// This daemon's node name and roles, as `canopy.toml` sets them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The node name: `node`, else the host name.
    pub node: String,
    pub roles: Vec<String>,
}

impl Default for Identity {
    fn default() -> Self {
        Self {
            node: host_name(),
            roles: Vec::new(),
        }
    }
}

impl Identity {
    /// The identity `node` and `roles` set (the host name when `node` is unset); every problem
    /// with its TOML path.
    pub fn of(node: Option<&str>, roles: &[String]) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let node = match node {
            Some(name) if !is_name(name) => {
                problems.push(format!(
                    "node: `{name}` is not a node name (ASCII letters, digits, `-`, `_`, `.`; at most 100)"
                ));
                String::new()
            }
            Some(name) => name.to_string(),
            None => host_name(),
        };
        for (i, role) in roles.iter().enumerate() {
            if !is_name(role) {
                problems.push(format!(
                    "roles[{i}]: `{role}` is not a role name (ASCII letters, digits, `-`, `_`, `.`)"
                ));
            }
        }
        if problems.is_empty() {
            Ok(Self {
                node,
                roles: roles.to_vec(),
            })
        } else {
            Err(problems)
        }
    }

    /// Whether automation narrowed to `nodes` and `roles_permitted` runs on this daemon (an
    /// empty list does not narrow).
    pub fn runs(&self, nodes: &[String], roles_permitted: &[String]) -> bool {
        (nodes.is_empty() || nodes.contains(&self.node))
            && (roles_permitted.is_empty()
                || roles_permitted.iter().any(|r| self.roles.contains(r)))
    }
}

/// This machine's host name (the default node name).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|name| name.trim().to_string())
        .ok()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Whether `text` may name a node, a role or a hook: ASCII letters, digits, `-`, `_`, `.`; at
/// most 100.
pub fn is_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 100
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_and_roles_narrow_only_when_listed() {
        let here = Identity {
            node: "build-1".into(),
            roles: vec!["controller".into()],
        };
        let none: &[String] = &[];
        assert!(here.runs(none, none));
        assert!(here.runs(&["build-1".into()], none));
        assert!(!here.runs(&["build-2".into()], none));
        assert!(here.runs(none, &["worker".into(), "controller".into()]));
        assert!(!here.runs(&["build-1".into()], &["worker".into()]));
    }

    #[test]
    fn a_bad_node_or_role_is_named_with_its_path() {
        let problems = Identity::of(Some("no spaces"), &["ok".into(), "bad role".into()])
            .expect_err("both are refused");
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("node: `no spaces`"), "{problems:?}");
        assert!(
            problems[1].starts_with("roles[1]: `bad role`"),
            "{problems:?}"
        );
        assert_eq!(Identity::of(None, &[]).expect("valid").node, host_name());
    }
}
