//! Capabilities: what a plugin may do beyond computing, as a manifest requests them and an
//! operator grants them (`--grant`). Their text form, parsed and printed, and which grant covers
//! which request. Enforcement is the executor host's (its `Grants`).

use std::collections::BTreeSet;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::{Component, Path};
use std::str::FromStr;

/// One capability.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Run any program (`run-command`).
    Process,
    /// Run only this program (`process:git`): a bare name, looked up on the daemon's `PATH`, or
    /// a path, which the plugin must name exactly.
    ProcessProgram(String),
    /// Queue messages for interactive sessions (`enqueue-message`).
    Sessions,
    /// Read the workdir (preopened read-only).
    FsRead,
    /// Read and write under this relative subpath of the workdir (`.` for all of it).
    FsWrite(String),
    /// Open outgoing sockets to any address but this machine's own (loopback), and resolve
    /// names.
    Network,
    /// Open outgoing sockets to one destination (`network:api.example.com:443`,
    /// `network:127.0.0.1:*`, `network:loopback`), and resolve names.
    NetworkTo(NetTarget),
}

/// Where a `network:<target>` grant lets a plugin connect.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetTarget {
    /// `loopback`: any port on this machine's loopback addresses.
    Loopback,
    /// `HOST:PORT`: a host name or IP address (IPv6 in brackets), and a port or `*` for any.
    Host { host: String, port: Option<u16> },
}

/// What the known capabilities look like, for error messages.
pub const KNOWN: &str = "process, process:<program>, sessions, fs-read, fs-write:<subpath>, network, network:<host>:<port|*>, network:loopback";

impl FromStr for Capability {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "process" => Ok(Self::Process),
            "sessions" => Ok(Self::Sessions),
            "fs-read" => Ok(Self::FsRead),
            "network" => Ok(Self::Network),
            other => {
                if let Some(sub) = other.strip_prefix("fs-write:") {
                    normalise_subpath(sub).map(Self::FsWrite)
                } else if let Some(program) = other.strip_prefix("process:") {
                    parse_program(program).map(Self::ProcessProgram)
                } else if let Some(target) = other.strip_prefix("network:") {
                    target.parse().map(Self::NetworkTo)
                } else {
                    Err(format!("unknown capability `{other}`; known: {KNOWN}"))
                }
            }
        }
    }
}

/// A program a `process:` grant names: one word, no control characters.
fn parse_program(program: &str) -> Result<String, String> {
    if program.is_empty() || program.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "capability `process:{program}`: name one program, like `process:git` or `process:/usr/bin/git`"
        ));
    }
    Ok(program.to_string())
}

impl FromStr for NetTarget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "loopback" {
            return Ok(Self::Loopback);
        }
        let wrong = |why: &str| {
            format!(
                "capability `network:{text}`: {why}; write `network:<host>:<port>` (port `*` for any, IPv6 in brackets) or `network:loopback`"
            )
        };
        let (host, port) = text.rsplit_once(':').ok_or_else(|| wrong("no port"))?;
        let port = match port {
            "*" => None,
            port => match port.parse::<u16>() {
                Ok(port) if port > 0 => Some(port),
                _ => return Err(wrong(&format!("`{port}` is not a port"))),
            },
        };
        let host = if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            inner
                .parse::<Ipv6Addr>()
                .map_err(|_| wrong(&format!("`{inner}` is not an IPv6 address")))?
                .to_string()
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            if ip.is_ipv6() {
                return Err(wrong("put an IPv6 address in brackets"));
            }
            ip.to_string()
        } else {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            let valid = !name.is_empty()
                && name.split('.').all(|label| {
                    !label.is_empty()
                        && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                });
            if !valid {
                return Err(wrong(&format!("`{host}` is not a host name or IP address")));
            }
            name
        };
        if host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
            return Err(wrong(
                "an unspecified address (0.0.0.0, ::) is not a destination",
            ));
        }
        Ok(Self::Host { host, port })
    }
}

impl fmt::Display for NetTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Loopback => f.write_str("loopback"),
            Self::Host { host, port } => {
                if host.parse::<Ipv6Addr>().is_ok() {
                    write!(f, "[{host}]")?;
                } else {
                    f.write_str(host)?;
                }
                match port {
                    Some(port) => write!(f, ":{port}"),
                    None => f.write_str(":*"),
                }
            }
        }
    }
}

impl NetTarget {
    /// A destination on this machine: `localhost` or a loopback address.
    pub fn is_local(&self) -> bool {
        match self {
            Self::Loopback => true,
            Self::Host { host, .. } => {
                host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
            }
        }
    }
}

/// True when a grant of `granted` covers a plugin's request for `requested`: the same
/// capability, or a wider one (`process` covers `process:git`; `network:h:*` covers
/// `network:h:443`; `network` covers any destination off this machine, `network:loopback` any
/// on it).
pub fn covers(granted: &BTreeSet<Capability>, requested: &Capability) -> bool {
    if granted.contains(requested) {
        return true;
    }
    match requested {
        Capability::ProcessProgram(_) => granted.contains(&Capability::Process),
        Capability::NetworkTo(
            target @ NetTarget::Host {
                host,
                port: Some(_),
            },
        ) => {
            granted.contains(&Capability::NetworkTo(NetTarget::Host {
                host: host.clone(),
                port: None,
            })) || covers_destination(granted, target)
        }
        Capability::NetworkTo(target) => covers_destination(granted, target),
        Capability::Process
        | Capability::Sessions
        | Capability::FsRead
        | Capability::FsWrite(_)
        | Capability::Network => false,
    }
}

fn covers_destination(granted: &BTreeSet<Capability>, target: &NetTarget) -> bool {
    if target.is_local() {
        granted.contains(&Capability::NetworkTo(NetTarget::Loopback))
    } else {
        granted.contains(&Capability::Network)
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Process => f.write_str("process"),
            Self::ProcessProgram(program) => write!(f, "process:{program}"),
            Self::Sessions => f.write_str("sessions"),
            Self::FsRead => f.write_str("fs-read"),
            Self::FsWrite(sub) => write!(f, "fs-write:{sub}"),
            Self::Network => f.write_str("network"),
            Self::NetworkTo(target) => write!(f, "network:{target}"),
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
