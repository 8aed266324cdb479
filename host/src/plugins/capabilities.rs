//! Capabilities: what a plugin may do beyond computing. Deny by default.
//!
//! A plugin requests capabilities in its manifest, the operator grants them at install
//! (`--grant`), and the grant is stored pinned to the plugin's sha256. Every host call and every
//! WASI preopen goes through [`Grants`], the one place that decides.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

/// One capability.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Run processes (`run-command`).
    Process,
    /// Queue messages for interactive sessions (`enqueue-message`).
    Sessions,
    /// Read the workdir (preopened read-only).
    FsRead,
    /// Read and write under this relative subpath of the workdir (`.` for all of it).
    FsWrite(String),
    /// Open outgoing sockets and resolve names.
    Network,
}

/// What the known capabilities look like, for error messages.
pub const KNOWN: &str = "process, sessions, fs-read, fs-write:<subpath>, network";

impl FromStr for Capability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "process" => Ok(Self::Process),
            "sessions" => Ok(Self::Sessions),
            "fs-read" => Ok(Self::FsRead),
            "network" => Ok(Self::Network),
            other => match other.strip_prefix("fs-write:") {
                Some(sub) => normalise_subpath(sub).map(Self::FsWrite),
                None => Err(format!("unknown capability `{other}`; known: {KNOWN}")),
            },
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Process => f.write_str("process"),
            Self::Sessions => f.write_str("sessions"),
            Self::FsRead => f.write_str("fs-read"),
            Self::FsWrite(sub) => write!(f, "fs-write:{sub}"),
            Self::Network => f.write_str("network"),
        }
    }
}

/// A relative subpath with no `..`, no absolute root; `.` means the workdir itself.
fn normalise_subpath(sub: &str) -> Result<String, String> {
    let path = Path::new(sub.trim());
    let mut parts = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(part) => parts.push(part.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return Err(format!(
                    "capability `fs-write:{sub}`: the subpath must stay inside the workdir (no `..`, not absolute)"
                ));
            }
        }
    }
    Ok(if parts.is_empty() {
        ".".to_string()
    } else {
        parts.join("/")
    })
}

/// Parses a list of capabilities (each entry may itself be comma-separated).
pub fn parse_list<S: AsRef<str>>(items: &[S]) -> Result<BTreeSet<Capability>, String> {
    items
        .iter()
        .flat_map(|item| {
            item.as_ref()
                .split(',')
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|item| !item.trim().is_empty())
        .map(|item| item.parse())
        .collect()
}

/// The capabilities granted to one plugin.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    plugin: String,
    granted: BTreeSet<Capability>,
}

/// A directory a call gets to see, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preopen {
    /// Canonical host path; also the path the guest sees.
    pub path: PathBuf,
    /// Whether the guest may write there.
    pub writable: bool,
}

impl Grants {
    /// The grant of `plugin`.
    pub fn new(plugin: impl Into<String>, granted: BTreeSet<Capability>) -> Self {
        Self {
            plugin: plugin.into(),
            granted,
        }
    }

    /// No capability at all (install-time `describe`, `validate`).
    pub fn none(plugin: impl Into<String>) -> Self {
        Self::new(plugin, BTreeSet::new())
    }

    /// Ok when `capability` is granted; otherwise an error naming it.
    pub fn require(&self, capability: &Capability) -> Result<(), String> {
        if self.granted.contains(capability) {
            Ok(())
        } else {
            Err(format!(
                "plugin `{}` lacks the `{capability}` capability; the operator grants it with `canopy plugin install <file> --grant {capability} --replace`",
                self.plugin
            ))
        }
    }

    /// Ok when networking is granted.
    pub fn network(&self) -> bool {
        self.granted.contains(&Capability::Network)
    }

    /// The directories to preopen for a call in `workdir` (already canonical). `fs-write`
    /// subfolders are created if missing; each is canonicalised and must stay inside the
    /// workdir, so neither `..` nor a symlink can lead out of it.
    pub fn preopens(&self, workdir: &Path) -> Result<Vec<Preopen>, String> {
        let mut preopens = Vec::new();
        if self.granted.contains(&Capability::FsRead) {
            preopens.push(Preopen {
                path: workdir.to_path_buf(),
                writable: false,
            });
        }
        for capability in &self.granted {
            let Capability::FsWrite(sub) = capability else {
                continue;
            };
            if sub == "." {
                // The workdir itself, already canonical: read-write instead of read-only.
                preopens.retain(|p: &Preopen| p.path != workdir);
                preopens.push(Preopen {
                    path: workdir.to_path_buf(),
                    writable: true,
                });
                continue;
            }
            let wanted = workdir.join(sub);
            std::fs::create_dir_all(&wanted).map_err(|err| {
                format!(
                    "cannot create {} for `{capability}`: {err}",
                    wanted.display()
                )
            })?;
            let real = wanted
                .canonicalize()
                .map_err(|err| format!("cannot resolve {}: {err}", wanted.display()))?;
            if !real.starts_with(workdir) {
                return Err(format!(
                    "`{capability}` resolves to {}, outside the workdir {}; refusing to open it",
                    real.display(),
                    workdir.display()
                ));
            }
            preopens.push(Preopen {
                path: real,
                writable: true,
            });
        }
        Ok(preopens)
    }
}

/// Resolves `path` (relative to `workdir` when relative) and checks it stays inside `workdir`.
pub fn inside_workdir(workdir: &Path, path: &str) -> Result<PathBuf, String> {
    let joined = workdir.join(path);
    let real = joined
        .canonicalize()
        .map_err(|err| format!("cannot resolve `{path}`: {err}"))?;
    if real.starts_with(workdir) {
        Ok(real)
    } else {
        Err(format!(
            "`{path}` resolves to {}, outside the workdir {}",
            real.display(),
            workdir.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_parse_and_print_round_trip() {
        for text in [
            "process",
            "sessions",
            "fs-read",
            "fs-write:docs",
            "fs-write:.",
            "network",
        ] {
            let parsed: Capability = text.parse().unwrap_or(Capability::Network);
            assert_eq!(parsed.to_string(), text);
        }
        assert_eq!(
            "fs-write:./docs/".parse::<Capability>(),
            Ok(Capability::FsWrite("docs".into()))
        );
    }

    #[test]
    fn escaping_subpaths_and_unknown_names_are_refused() {
        assert!("fs-write:../x".parse::<Capability>().is_err());
        assert!("fs-write:/etc".parse::<Capability>().is_err());
        let err = "root".parse::<Capability>().err().unwrap_or_default();
        assert!(err.contains("unknown capability `root`"), "{err}");
    }

    #[test]
    fn require_names_the_missing_capability() {
        let grants = Grants::none("hostile");
        let err = grants
            .require(&Capability::Process)
            .err()
            .unwrap_or_default();
        assert!(err.contains("lacks the `process` capability"), "{err}");
    }

    #[test]
    fn write_preopen_through_a_symlink_out_of_the_workdir_is_refused() -> Result<(), String> {
        let outside = tempfile::tempdir().map_err(|e| e.to_string())?;
        let workdir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let workdir_path = workdir.path().canonicalize().map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(outside.path(), workdir_path.join("docs"))
            .map_err(|e| e.to_string())?;
        let grants = Grants::new("p", BTreeSet::from([Capability::FsWrite("docs".into())]));
        let err = grants.preopens(&workdir_path).err().unwrap_or_default();
        assert!(err.contains("outside the workdir"), "{err}");
        Ok(())
    }
}
