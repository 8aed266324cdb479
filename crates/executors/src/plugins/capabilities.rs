//! Capabilities: what a plugin may do beyond computing. Deny by default.
//!
//! A plugin requests capabilities in its manifest, the operator grants them at install
//! (`--grant`), and the grant is stored pinned to the plugin's sha256. Every host call and every
//! WASI preopen goes through [`Grants`], the one place that decides.

use std::collections::BTreeSet;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::time::Duration;

use canopy_model::capabilities::{Capability, NetTarget};

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

    /// Whether the plugin may run `program`, and how: any program with `process`, or only the
    /// ones its `process:<program>` grants name (exactly as written). The error names the
    /// program and the grant.
    pub fn program(&self, program: &str) -> Result<ProgramGrant, String> {
        if self.granted.contains(&Capability::Process) {
            return Ok(ProgramGrant::Any);
        }
        let listed: Vec<String> = self
            .granted
            .iter()
            .filter_map(|c| match c {
                Capability::ProcessProgram(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        if listed.iter().any(|p| p == program) {
            return Ok(ProgramGrant::Listed);
        }
        if listed.is_empty() {
            return self
                .require(&Capability::Process)
                .map(|()| ProgramGrant::Any);
        }
        Err(format!(
            "plugin `{}` may not run `{program}`: its grant allows only {}; the operator grants it with `canopy plugin install <file> --grant process:{program} --replace` (or `--grant process` for any program)",
            self.plugin,
            listed
                .iter()
                .map(|p| format!("`process:{p}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// The network the plugin may reach, or none without a network grant.
    pub fn network(&self) -> Option<NetPolicy> {
        let mut policy = NetPolicy {
            plugin: self.plugin.clone(),
            anywhere: false,
            loopback: false,
            hosts: Vec::new(),
        };
        let mut any = false;
        for capability in &self.granted {
            match capability {
                Capability::Network => policy.anywhere = true,
                Capability::NetworkTo(NetTarget::Loopback) => policy.loopback = true,
                Capability::NetworkTo(NetTarget::Host { host, port }) => {
                    policy.hosts.push((host.clone(), *port));
                }
                Capability::Process
                | Capability::ProcessProgram(_)
                | Capability::Sessions
                | Capability::FsRead
                | Capability::FsWrite(_) => continue,
            }
            any = true;
        }
        any.then_some(policy)
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
            let real = create_inside(workdir, sub)
                .map_err(|err| format!("`{capability}`: {err}; refusing to open it"))?;
            preopens.push(Preopen {
                path: real,
                writable: true,
            });
        }
        Ok(preopens)
    }
}

/// How a plugin may run a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgramGrant {
    /// `process`: any program, resolved as the process's `PATH` says.
    Any,
    /// Named by a `process:<program>` grant: a bare name must be resolved on the daemon's own
    /// `PATH`, not one the plugin passes.
    Listed,
}

/// What a socket address is used for, as far as a grant cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetUse {
    /// Binding a local address (implicitly, before a connect or a send, it is the wildcard
    /// address with port 0).
    Bind,
    /// Listening, accepting.
    Serve,
    /// Connecting to, sending to or receiving from a remote address.
    Reach,
}

/// How long resolving the host names of a grant may take.
const RESOLVE_LIMIT: Duration = Duration::from_secs(5);

/// The network a call may reach, from its grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetPolicy {
    plugin: String,
    /// `network`: every address off this machine.
    anywhere: bool,
    /// `network:loopback`.
    loopback: bool,
    /// `network:HOST:PORT` entries.
    hosts: Vec<(String, Option<u16>)>,
}

/// A [`NetPolicy`] with its host names resolved: what the socket address check consults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetAccess {
    plugin: String,
    anywhere: bool,
    loopback: bool,
    allowed: Vec<(IpAddr, Option<u16>)>,
    /// This machine's own addresses (its interfaces'), reached only through a grant naming them.
    own: Arc<[IpAddr]>,
}

impl NetPolicy {
    /// Resolves the host names of the grant (once per call). `localhost` is the loopback
    /// addresses; any other name counts only for the addresses off this machine it resolves
    /// to, so a name cannot lead a plugin to loopback. A name that does not resolve allows
    /// nothing.
    pub async fn resolve(&self) -> NetAccess {
        let mut allowed = Vec::new();
        for (host, port) in &self.hosts {
            if let Ok(ip) = host.parse::<IpAddr>() {
                allowed.push((ip, *port));
            } else if host == "localhost" {
                allowed.push((IpAddr::from([127, 0, 0, 1]), *port));
                allowed.push((IpAddr::from(Ipv6Addr::LOCALHOST), *port));
            } else {
                let lookup = tokio::time::timeout(
                    RESOLVE_LIMIT,
                    tokio::net::lookup_host((host.as_str(), 0)),
                )
                .await;
                match lookup {
                    Ok(Ok(addrs)) => allowed.extend(
                        addrs
                            .map(|addr| canonical_ip(addr.ip()))
                            .filter(|ip| !on_this_machine(*ip))
                            .map(|ip| (ip, *port)),
                    ),
                    Ok(Err(err)) => {
                        tracing::warn!(plugin = %self.plugin, host, %err, "cannot resolve a host of the plugin's network grant; it allows nothing")
                    }
                    Err(_) => {
                        tracing::warn!(plugin = %self.plugin, host, "resolving a host of the plugin's network grant timed out; it allows nothing")
                    }
                }
            }
        }
        NetAccess {
            plugin: self.plugin.clone(),
            anywhere: self.anywhere,
            loopback: self.loopback,
            allowed,
            own: own_addresses(),
        }
    }
}

impl NetAccess {
    /// Whether the plugin may use `addr` for `usage`. Binding is only the implicit bind to an
    /// ephemeral port; serving is never allowed; a remote address must be on the grant. Plain
    /// `network` reaches the internet only: loopback needs `network:loopback` (or a loopback
    /// entry), and this machine's other addresses, link-local ones (169.254.169.254, the cloud
    /// metadata service, among them) and private ranges need an entry naming them.
    pub fn permits(&self, addr: SocketAddr, usage: NetUse) -> bool {
        let ip = canonical_ip(addr.ip());
        match usage {
            NetUse::Bind => ip.is_unspecified() && addr.port() == 0,
            NetUse::Serve => false,
            NetUse::Reach => {
                if self
                    .allowed
                    .iter()
                    .any(|(allowed, port)| *allowed == ip && port.is_none_or(|p| p == addr.port()))
                {
                    return true;
                }
                if on_this_machine(ip) {
                    self.loopback && !ip.is_unspecified()
                } else if self.own.contains(&ip) || not_public(ip) {
                    false
                } else {
                    self.anywhere
                }
            }
        }
    }

    /// The plugin this access belongs to.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }
}

/// An IPv4 address written as IPv6 (`::ffff:127.0.0.1`) is that IPv4 address.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Loopback, or the unspecified address (which a connect takes as this machine).
fn on_this_machine(ip: IpAddr) -> bool {
    ip.is_loopback() || ip.is_unspecified()
}

/// Addresses plain `network` does not reach: link-local (169.254.0.0/16, fe80::/10: the cloud
/// metadata service), private (10/8, 172.16/12, 192.168/16, fc00::/7), shared (100.64/10),
/// multicast and broadcast.
fn not_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            v4.is_private()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || (a == 100 && (64..128).contains(&b))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            v6.is_multicast() || (first & 0xffc0) == 0xfe80 || (first & 0xfe00) == 0xfc00
        }
    }
}

/// This machine's interface addresses, read at most every 30 s.
fn own_addresses() -> Arc<[IpAddr]> {
    type Cached = (std::time::Instant, Arc<[IpAddr]>);
    static CACHE: std::sync::Mutex<Option<Cached>> = std::sync::Mutex::new(None);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((read_at, addresses)) = cache.as_ref()
        && read_at.elapsed() < std::time::Duration::from_secs(30)
    {
        return addresses.clone();
    }
    let addresses: Arc<[IpAddr]> = interface_addresses().into();
    *cache = Some((std::time::Instant::now(), addresses.clone()));
    addresses
}

/// The addresses of this machine's interfaces (`getifaddrs`); none when it fails.
fn interface_addresses() -> Vec<IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list it allocates into `list`; freed below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut addresses = Vec::new();
    let mut next = list;
    while !next.is_null() {
        // SAFETY: `next` is a node of the list getifaddrs returned, not freed yet.
        let entry = unsafe { &*next };
        if !entry.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr whose family says its real type.
            let family = i32::from(unsafe { (*entry.ifa_addr).sa_family });
            if family == libc::AF_INET {
                // SAFETY: an AF_INET address is a sockaddr_in.
                let v4 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in>() };
                addresses.push(IpAddr::from(v4.sin_addr.s_addr.to_ne_bytes()));
            } else if family == libc::AF_INET6 {
                // SAFETY: an AF_INET6 address is a sockaddr_in6.
                let v6 = unsafe { &*entry.ifa_addr.cast::<libc::sockaddr_in6>() };
                addresses.push(IpAddr::from(v6.sin6_addr.s6_addr));
            }
        }
        next = entry.ifa_next;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    addresses
}

/// Creates `sub` (a normalised relative path) under `workdir` one folder at a time, resolving
/// each step before anything is created under it, so a symlink planted in the workdir can never
/// make the host create a folder outside it. Returns the canonical folder.
fn create_inside(workdir: &Path, sub: &str) -> Result<PathBuf, String> {
    let mut current = workdir.to_path_buf();
    for part in Path::new(sub).components() {
        let next = current.join(part);
        match std::fs::create_dir(&next) {
            Ok(()) => {}
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(format!("cannot create {}: {err}", next.display())),
        }
        let real = next
            .canonicalize()
            .map_err(|err| format!("cannot resolve {}: {err}", next.display()))?;
        if !real.starts_with(workdir) {
            return Err(format!(
                "{} resolves to {}, outside the workdir {}",
                next.display(),
                real.display(),
                workdir.display()
            ));
        }
        if !real.is_dir() {
            return Err(format!("{} is not a folder", next.display()));
        }
        current = real;
    }
    Ok(current)
}

/// Resolves `path` (relative to `workdir` when relative) and checks it stays inside `workdir`,
/// which is resolved already: the workdir itself (the usual `cwd` of a command) is taken as it
/// is, without resolving it again.
pub fn inside_workdir(workdir: &Path, path: &str) -> Result<PathBuf, String> {
    let joined = workdir.join(path);
    if joined == workdir {
        return Ok(joined);
    }
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
    use canopy_model::capabilities::{covers, parse_list};

    #[test]
    fn capabilities_parse_and_print_round_trip() {
        for text in [
            "process",
            "sessions",
            "fs-read",
            "fs-write:docs",
            "fs-write:.",
            "network",
            "process:git",
            "process:/usr/bin/git",
            "network:api.example.com:443",
            "network:127.0.0.1:8080",
            "network:[::1]:*",
            "network:loopback",
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
    fn malformed_program_and_network_grants_are_refused() {
        for bad in [
            "process:",
            "process:git status",
            "network:example.com",
            "network:example.com:0",
            "network:example.com:http",
            "network:::1:80",
            "network:0.0.0.0:80",
            "network:exa mple.com:80",
            "network:a..b:80",
        ] {
            assert!(bad.parse::<Capability>().is_err(), "{bad} was accepted");
        }
        assert_eq!(
            "network:API.Example.com.:443".parse::<Capability>(),
            Ok(Capability::NetworkTo(NetTarget::Host {
                host: "api.example.com".into(),
                port: Some(443)
            }))
        );
    }

    fn set(items: &[&str]) -> BTreeSet<Capability> {
        parse_list(items).unwrap_or_default()
    }

    fn one(item: &str) -> Capability {
        item.parse().unwrap_or(Capability::Sessions)
    }

    #[test]
    fn wider_grants_cover_narrower_requests() {
        let cases = [
            (&["process"][..], "process:git", true),
            (&["process:git"][..], "process:git", true),
            (&["process:git"][..], "process", false),
            (&["process:git"][..], "process:/usr/bin/git", false),
            (&["network"][..], "network:api.example.com:443", true),
            (&["network"][..], "network:127.0.0.1:8080", false),
            (&["network"][..], "network:localhost:8080", false),
            (&["network:loopback"][..], "network:127.0.0.1:8080", true),
            (
                &["network:api.example.com:*"][..],
                "network:api.example.com:443",
                true,
            ),
            (
                &["network:api.example.com:443"][..],
                "network:api.example.com:*",
                false,
            ),
            (&["network:127.0.0.1:8080"][..], "network", false),
        ];
        for (granted, requested, expected) in cases {
            assert_eq!(
                covers(&set(granted), &one(requested)),
                expected,
                "{granted:?} covers {requested}"
            );
        }
    }

    #[test]
    fn a_program_grant_allows_exactly_its_programs() {
        let grants = Grants::new("p", set(&["process:git", "process:/usr/bin/make"]));
        assert_eq!(grants.program("git"), Ok(ProgramGrant::Listed));
        assert_eq!(grants.program("/usr/bin/make"), Ok(ProgramGrant::Listed));
        for refused in ["env", "/usr/bin/git", "./git", "make"] {
            let err = grants.program(refused).err().unwrap_or_default();
            assert!(
                err.contains(&format!("may not run `{refused}`")) && err.contains("`process:git`"),
                "{err}"
            );
        }
        let any = Grants::new("p", set(&["process"]));
        assert_eq!(any.program("/bin/anything"), Ok(ProgramGrant::Any));
        let none = Grants::none("p").program("git").err().unwrap_or_default();
        assert!(none.contains("lacks the `process` capability"), "{none}");
    }

    #[tokio::test]
    async fn network_grants_reach_what_they_name_and_loopback_only_explicitly() {
        let addr = |text: &str| {
            text.parse::<SocketAddr>()
                .unwrap_or(SocketAddr::from(([0; 4], 1)))
        };
        let access = |items: &[&str]| {
            let grants = Grants::new("p", set(items));
            async move {
                match grants.network() {
                    Some(policy) => Some(policy.resolve().await),
                    None => None,
                }
            }
        };
        assert_eq!(access(&["fs-read", "process"]).await, None);

        let anywhere = access(&["network"]).await;
        let reach = |access: &Option<NetAccess>, text: &str| {
            access
                .as_ref()
                .is_some_and(|a| a.permits(addr(text), NetUse::Reach))
        };
        assert!(reach(&anywhere, "93.184.216.34:443"));
        assert!(reach(&anywhere, "[2606:2800:220:1::]:443"));
        for local in [
            "127.0.0.1:7461",
            "127.8.8.8:80",
            "[::1]:7461",
            "[::ffff:127.0.0.1]:7461",
            "0.0.0.0:7461",
        ] {
            assert!(!reach(&anywhere, local), "plain network reached {local}");
        }
        let bind = |access: &Option<NetAccess>, text: &str, usage| {
            access
                .as_ref()
                .is_some_and(|a| a.permits(addr(text), usage))
        };
        assert!(bind(&anywhere, "0.0.0.0:0", NetUse::Bind));
        assert!(bind(&anywhere, "[::]:0", NetUse::Bind));
        assert!(!bind(&anywhere, "0.0.0.0:8080", NetUse::Bind));
        assert!(!bind(&anywhere, "0.0.0.0:0", NetUse::Serve));

        let one_port = access(&["network:127.0.0.1:8080"]).await;
        assert!(reach(&one_port, "127.0.0.1:8080"));
        assert!(reach(&one_port, "[::ffff:127.0.0.1]:8080"));
        assert!(!reach(&one_port, "127.0.0.1:8081"));
        assert!(!reach(&one_port, "[::1]:8080"));
        assert!(!reach(&one_port, "93.184.216.34:8080"));

        let localhost = access(&["network:localhost:*"]).await;
        assert!(reach(&localhost, "127.0.0.1:1") && reach(&localhost, "[::1]:65535"));
        let loopback = access(&["network:loopback"]).await;
        assert!(reach(&loopback, "127.0.0.1:7461") && !reach(&loopback, "0.0.0.0:7461"));
        assert!(!reach(&loopback, "93.184.216.34:443"));
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
    fn a_cwd_resolves_inside_the_workdir_or_is_refused() -> Result<(), String> {
        let outside = tempfile::tempdir().map_err(|e| e.to_string())?;
        let workdir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let root = workdir.path().canonicalize().map_err(|e| e.to_string())?;
        std::fs::create_dir(root.join("sub")).map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(outside.path(), root.join("out")).map_err(|e| e.to_string())?;
        let root_text = root.to_string_lossy().into_owned();
        assert_eq!(inside_workdir(&root, &root_text)?, root);
        assert_eq!(inside_workdir(&root, ".")?, root.join("."));
        assert_eq!(inside_workdir(&root, "sub")?, root.join("sub"));
        for escape in ["..", "out", "sub/../..", &format!("{root_text}/out")] {
            let err = inside_workdir(&root, escape).expect_err(escape);
            assert!(err.contains("outside the workdir"), "{escape}: {err}");
        }
        Ok(())
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

    #[test]
    fn a_grant_through_a_planted_symlink_creates_nothing_outside() -> Result<(), String> {
        let outside = tempfile::tempdir().map_err(|e| e.to_string())?;
        let workdir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let workdir_path = workdir.path().canonicalize().map_err(|e| e.to_string())?;
        std::os::unix::fs::symlink(outside.path(), workdir_path.join("link_outdir"))
            .map_err(|e| e.to_string())?;
        let grants = Grants::new(
            "p",
            BTreeSet::from([Capability::FsWrite("link_outdir/newdir".into())]),
        );
        let err = grants.preopens(&workdir_path).err().unwrap_or_default();
        assert!(err.contains("outside the workdir"), "{err}");
        assert!(
            !outside.path().join("newdir").exists(),
            "the refused grant created a folder outside the workdir"
        );
        // A nested grant inside the workdir is created step by step.
        let nested = Grants::new("p", BTreeSet::from([Capability::FsWrite("a/b/c".into())]));
        let preopens = nested.preopens(&workdir_path)?;
        assert_eq!(preopens[0].path, workdir_path.join("a/b/c"));
        Ok(())
    }
}
