//! Files in the directories the plugin's grant opens (`fs-read`, `fs-write:<subpath>`).
//!
//! `std::fs` works as usual for everything. [`append`] is here because appending with `std::fs`
//! goes through a non-blocking stream write that the host hands to a worker thread; writing
//! with a blocking write on the file's append stream stays on the calling thread and is several
//! times cheaper for the small appends hooks typically make.

use wasip2::filesystem::preopens::get_directories;
use wasip2::filesystem::types::{Descriptor, DescriptorFlags, OpenFlags, PathFlags};

/// Largest write the stream takes at once.
const CHUNK: usize = 4096;

/// The preopened directory holding `path` (the longest matching one) and the path inside it.
fn locate(path: &str) -> Result<(Descriptor, String), String> {
    if !path.starts_with('/') {
        return Err(format!(
            "`{path}` is a relative path; give an absolute one inside a granted directory (for a file in the workdir: format!(\"{{}}/{path}\", invocation.workdir()))"
        ));
    }
    let mut best: Option<(Descriptor, String, usize)> = None;
    for (dir, guest) in get_directories() {
        let root = guest.trim_end_matches('/');
        let inside = path
            .strip_prefix(root)
            .and_then(|rest| rest.strip_prefix('/'));
        if let Some(rest) = inside
            && best.as_ref().is_none_or(|(_, _, len)| root.len() > *len)
        {
            let rest = rest.to_string();
            best = Some((dir, rest, root.len()));
        }
    }
    best.map(|(dir, rest, _)| (dir, rest))
        .ok_or_else(|| format!("`{path}` is outside every directory this plugin was granted"))
}

/// Appends `bytes` to the file at `path` (absolute, inside a granted directory), creating it if
/// missing. Needs `fs-write` on that directory.
pub fn append(path: &str, bytes: &[u8]) -> Result<(), String> {
    let (dir, relative) = locate(path)?;
    let file = dir
        .open_at(
            PathFlags::SYMLINK_FOLLOW,
            &relative,
            OpenFlags::CREATE,
            DescriptorFlags::WRITE,
        )
        .map_err(|err| format!("cannot open `{path}` for appending: {err:?}"))?;
    let stream = file
        .append_via_stream()
        .map_err(|err| format!("cannot append to `{path}`: {err:?}"))?;
    for chunk in bytes.chunks(CHUNK) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|err| format!("cannot append to `{path}`: {err:?}"))?;
    }
    Ok(())
}
