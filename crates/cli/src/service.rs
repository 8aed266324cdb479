//! `canopy daemon install-service`: the daemon as a service of the user's service manager -- a
//! systemd user unit on Linux, a launchd agent on macOS -- started at login (or boot, with
//! lingering), restarted when it fails, and given the stop grace its drain needs.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use canopy_datadir::DataDir;

/// How long the service manager lets a stop take before it kills the daemon: the drain's
/// default budget (30 s) and its force grace, with room to spare.
const STOP_GRACE_SECS: u64 = 60;

/// The service's definition and where it goes.
struct Service {
    path: PathBuf,
    text: String,
    /// What to run once the file is in place.
    then: Vec<String>,
}

pub fn install(data: &DataDir, listen: Option<&str>, print: bool) -> Result<ExitCode> {
    let exe = std::env::current_exe()
        .and_then(|exe| exe.canonicalize())
        .context("cannot find the canopy binary the service is to run")?;
    let data_dir = std::path::absolute(data.root())
        .with_context(|| format!("cannot make {} absolute", data.root().display()))?;
    let mut args = vec![
        "daemon".to_string(),
        "--data-dir".to_string(),
        data_dir.to_string_lossy().into_owned(),
    ];
    if let Some(listen) = listen {
        args.extend(["--listen".to_string(), listen.to_string()]);
    }
    // The service manager starts it with a bare environment: the PATH of this shell is kept, so
    // the agent CLIs (claude, codex) and tools its nodes run are found as they are here.
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    let service = if cfg!(target_os = "macos") {
        launchd(&exe, &args, &path, &data_dir)?
    } else {
        systemd(&exe, &args, &path, &data_dir)?
    };
    if print {
        print!("{}", service.text);
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(parent) = service.path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    let existed = service.path.exists();
    let partial = service.path.with_extension("partial");
    std::fs::write(&partial, &service.text)
        .and_then(|()| std::fs::rename(&partial, &service.path))
        .with_context(|| format!("cannot write {}", service.path.display()))?;
    println!(
        "{} {}",
        if existed { "updated" } else { "wrote" },
        service.path.display()
    );
    if canopy_daemon::daemon::holder(data).is_some() {
        println!(
            "a daemon runs now for this data dir: stop it first (`canopy daemon stop`), or the service's will find the data dir taken"
        );
    }
    println!("then:");
    for step in &service.then {
        println!("  {step}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A systemd user unit (`~/.config/systemd/user/canopy.service`).
fn systemd(exe: &Path, args: &[String], path: &str, data_dir: &Path) -> Result<Service> {
    let config = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => home()?.join(".config"),
    };
    let exec: Vec<String> = std::iter::once(exe.to_string_lossy().into_owned())
        .chain(args.iter().cloned())
        .map(|arg| systemd_quote(&arg))
        .collect();
    let text = format!(
        "# Written by `canopy daemon install-service`; run it again to update this file.\n\
         [Unit]\n\
         Description=Canopy daemon (data dir {data})\n\
         After=network.target\n\
         \n\
         [Service]\n\
         Type=simple\n\
         ExecStart={exec}\n\
         Environment={env}\n\
         # A failed daemon is started again; a planned stop (`canopy daemon stop`, systemctl stop)\n\
         # is not.\n\
         Restart=on-failure\n\
         RestartSec=5\n\
         # SIGTERM starts the daemon's drain; what is still running after the grace is killed.\n\
         KillMode=mixed\n\
         TimeoutStopSec={STOP_GRACE_SECS}\n\
         \n\
         [Install]\n\
         WantedBy=default.target\n",
        data = systemd_escape(&data_dir.to_string_lossy()),
        exec = exec.join(" "),
        env = systemd_quote(&format!("PATH={path}")),
    );
    Ok(Service {
        path: config.join("systemd/user/canopy.service"),
        text,
        then: vec![
            "systemctl --user daemon-reload".to_string(),
            "systemctl --user enable --now canopy".to_string(),
            "loginctl enable-linger \"$USER\"   # optional: run it while you are logged out too"
                .to_string(),
        ],
    })
}

/// A launchd agent (`~/Library/LaunchAgents/dev.canopy.daemon.plist`).
fn launchd(exe: &Path, args: &[String], path: &str, data_dir: &Path) -> Result<Service> {
    let home = home()?;
    let program: String = std::iter::once(exe.to_string_lossy().into_owned())
        .chain(args.iter().cloned())
        .map(|arg| format!("    <string>{}</string>\n", xml_escape(&arg)))
        .collect();
    let log = data_dir.join("daemon.stderr");
    let text = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <!DOCTYPE plist PUBLIC \"-//Apple//DTD PLIST 1.0//EN\" \"http://www.apple.com/DTDs/PropertyList-1.0.dtd\">\n\
         <!-- Written by `canopy daemon install-service`; run it again to update this file. -->\n\
         <plist version=\"1.0\">\n\
         <dict>\n\
         \x20 <key>Label</key>\n\
         \x20 <string>dev.canopy.daemon</string>\n\
         \x20 <key>ProgramArguments</key>\n\
         \x20 <array>\n\
         {program}\
         \x20 </array>\n\
         \x20 <key>EnvironmentVariables</key>\n\
         \x20 <dict>\n\
         \x20   <key>PATH</key>\n\
         \x20   <string>{path}</string>\n\
         \x20 </dict>\n\
         \x20 <key>RunAtLoad</key>\n\
         \x20 <true/>\n\
         \x20 <key>KeepAlive</key>\n\
         \x20 <dict>\n\
         \x20   <key>SuccessfulExit</key>\n\
         \x20   <false/>\n\
         \x20 </dict>\n\
         \x20 <key>ExitTimeOut</key>\n\
         \x20 <integer>{STOP_GRACE_SECS}</integer>\n\
         \x20 <key>StandardErrorPath</key>\n\
         \x20 <string>{log}</string>\n\
         </dict>\n\
         </plist>\n",
        path = xml_escape(path),
        log = xml_escape(&log.to_string_lossy()),
    );
    let file = home.join("Library/LaunchAgents/dev.canopy.daemon.plist");
    Ok(Service {
        then: vec![format!(
            "launchctl bootstrap gui/$(id -u) {}",
            canopy_shell_words::quote(&file.to_string_lossy())
        )],
        path: file,
        text,
    })
}

fn home() -> Result<PathBuf> {
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home)),
        None => bail!("HOME is not set: cannot tell where the service file goes"),
    }
}

/// One word of a systemd command line or assignment, double-quoted: `\` and `"` escaped, and
/// `%` and `$` doubled so that systemd takes them literally (not as specifiers or variables).
fn systemd_quote(word: &str) -> String {
    format!("\"{}\"", systemd_escape(word))
}

fn systemd_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '%' => out.push_str("%%"),
            '$' => out.push_str("$$"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_with_specials_is_one_literal_word_to_systemd() {
        assert_eq!(
            systemd_quote("/home/a b/100%$x\"y\\z"),
            "\"/home/a b/100%%$$x\\\"y\\\\z\""
        );
    }
}
