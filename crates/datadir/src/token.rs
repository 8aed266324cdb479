//! The daemon's API token, `daemon.token` in the data dir: 32 random bytes as hex, readable by
//! its user only. It stays the same across restarts (so configured MCP clients and scripts keep
//! working); `canopy daemon rotate-token` replaces it. A start reuses the file only when it is
//! a private regular file of this user holding a well-formed token; anything else (a symlink, a
//! file others could read, a truncated token) is replaced by a new one.

use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use anyhow::{Context, Result};

/// Random bytes in a token (hex in the file: twice as many characters).
const TOKEN_BYTES: usize = 32;

/// What a start finds in the token file.
#[derive(Debug, PartialEq, Eq)]
pub enum Found {
    /// A token the daemon may go on using.
    Usable(String),
    /// There is no token file.
    Missing,
    /// A file that must not be trusted, and why.
    Unusable(&'static str),
}

/// Reads the token at `path` without following a symlink or blocking on a FIFO, and says
/// whether it may be reused. Call before the data dir is tightened: a token others could read
/// is not reused even once its mode is fixed.
pub fn inspect(path: &Path) -> Found {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let mut file = match file {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Found::Missing,
        Err(err) if err.raw_os_error() == Some(libc::ELOOP) => return Found::Unusable("a symlink"),
        Err(_) => return Found::Unusable("unreadable"),
    };
    let Ok(meta) = file.metadata() else {
        return Found::Unusable("unreadable");
    };
    if !meta.is_file() {
        return Found::Unusable("not a regular file");
    }
    // SAFETY: geteuid(2) takes no arguments and cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Found::Unusable("owned by another user");
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Found::Unusable("readable or writable by other users");
    }
    let mut text = String::new();
    // A token is 65 bytes with its newline: more than a little over is not one.
    if (&mut file).take(256).read_to_string(&mut text).is_err() {
        return Found::Unusable("not text");
    }
    let token = text.trim();
    if token.len() == TOKEN_BYTES * 2 && token.bytes().all(|b| b.is_ascii_hexdigit()) {
        Found::Usable(token.to_string())
    } else {
        Found::Unusable("not a well-formed token")
    }
}

/// Writes a new token to `path`, readable by this user only, replacing the file whole (a
/// reader never sees half a token; a symlink there is replaced, not followed).
pub fn write_new(path: &Path) -> Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|err| anyhow::anyhow!("cannot draw random bytes for the API token: {err}"))?;
    let token = hex::encode(bytes);
    let partial = path.with_extension("token.partial");
    // A leftover from a crash may have other permissions; `mode` applies only to a new file.
    match std::fs::remove_file(&partial) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => {
            return Err(err).with_context(|| format!("cannot remove {}", partial.display()));
        }
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("cannot create {}", partial.display()))?;
    file.write_all(format!("{token}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(token)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_written_token_is_reused_and_anything_doubtful_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.token");
        assert_eq!(inspect(&path), Found::Missing);
        let token = write_new(&path).unwrap();
        assert_eq!(inspect(&path), Found::Usable(token.clone()));
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );

        // Others could have read it.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            inspect(&path),
            Found::Unusable("readable or writable by other users")
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();

        // Cut short, or padded past a token.
        std::fs::write(&path, &token[..40]).unwrap();
        assert_eq!(inspect(&path), Found::Unusable("not a well-formed token"));
        std::fs::write(&path, "z".repeat(64)).unwrap();
        assert_eq!(inspect(&path), Found::Unusable("not a well-formed token"));
        std::fs::write(&path, "a".repeat(100_000)).unwrap();
        assert_eq!(inspect(&path), Found::Unusable("not a well-formed token"));

        // A symlink planted in its place, to a token-looking file: not followed, and a new
        // token replaces the link itself.
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, format!("{token}\n")).unwrap();
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(inspect(&path), Found::Unusable("a symlink"));
        let fresh = write_new(&path).unwrap();
        assert_ne!(fresh, token);
        assert!(
            !std::fs::symlink_metadata(&path)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(&elsewhere).unwrap().trim(),
            token,
            "the link's target was written through"
        );

        // A FIFO does not block the start.
        std::fs::remove_file(&path).unwrap();
        let fifo = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo(3) with a valid NUL-terminated path and a mode.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        assert_eq!(inspect(&path), Found::Unusable("not a regular file"));
    }
}
