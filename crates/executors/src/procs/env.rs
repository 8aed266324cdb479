//! The environment a process gets: a clean one, never the daemon's whole environment.

use std::ffi::OsString;
use std::path::PathBuf;

/// Variables every process gets from the daemon's environment when the daemon has them.
pub const BASE: [&str; 5] = ["PATH", "HOME", "LANG", "TZ", "TERM"];

/// The variables handed down from the daemon's environment: [`BASE`] and then `pass_env`,
/// each only when `lookup` finds it.
pub fn inherited(
    pass_env: &[String],
    lookup: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut names: Vec<&str> = BASE.to_vec();
    for name in pass_env {
        if !names.contains(&name.as_str()) {
            names.push(name);
        }
    }
    names
        .into_iter()
        .filter_map(|name| lookup(name).map(|value| (name.to_string(), value)))
        .collect()
}

/// Finds `program` (a bare name) in the directories of `path`: the first regular file there
/// that is executable.
pub fn which(program: &str, path: Option<&OsString>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    let path = path?;
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
}

/// True when `program` names a path (it holds a `/`) rather than a name looked up on `PATH`.
pub fn is_path(program: &str) -> bool {
    program.contains('/')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_base_and_passed_variables_are_inherited() {
        let daemon = |name: &str| match name {
            "PATH" => Some(OsString::from("/usr/bin:/bin")),
            "HOME" => Some(OsString::from("/home/me")),
            "SECRET_TOKEN" => Some(OsString::from("hunter2")),
            "SSH_AUTH_SOCK" => Some(OsString::from("/tmp/agent.sock")),
            _ => None,
        };
        let names = |vars: Vec<(String, OsString)>| {
            vars.into_iter().map(|(name, _)| name).collect::<Vec<_>>()
        };
        assert_eq!(names(inherited(&[], daemon)), ["PATH", "HOME"]);
        assert_eq!(
            names(inherited(
                &["SSH_AUTH_SOCK".into(), "MISSING".into(), "PATH".into()],
                daemon
            )),
            ["PATH", "HOME", "SSH_AUTH_SOCK"]
        );
    }

    #[test]
    fn which_finds_executables_on_absolute_path_entries_only() {
        let path = OsString::from("relative:/usr/bin:/bin");
        let sh = which("sh", Some(&path));
        assert!(sh.as_ref().is_some_and(|p| p.is_absolute()), "{sh:?}");
        assert_eq!(which("no-such-program-canopy", Some(&path)), None);
        assert_eq!(which("sh", None), None);
        assert!(is_path("./git") && is_path("/usr/bin/git") && !is_path("git"));
    }
}
