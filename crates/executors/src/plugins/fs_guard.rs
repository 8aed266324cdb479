//! Guards on WASI filesystem calls that wasmtime-wasi allows but Canopy does not.
//!
//! File operations run on the calling thread (much faster for small files than a hop to the
//! blocking pool), which is only safe while no operation can block for long. Opening a FIFO
//! blocks until a writer appears, and that would pin a runtime thread past any deadline. So
//! `open-at` is shadowed too: it refuses anything that is not a regular file, a folder or a
//! symlink to one (a FIFO, a socket, a device).
//!
//! A guest cannot follow a symlink out of its preopen (wasmtime-wasi refuses that), but it can
//! *create* one: with `fs-write:out` a plugin could plant `out/evil -> ../../outside/secret`, and
//! a command, an agent or git run later in the workdir would follow it. So `symlink-at` is
//! shadowed here: a link's target must be a relative path that only goes down (no `..`), or an
//! absolute path inside the workdir. Every link a guest makes then resolves inside the workdir,
//! and stays so however the guest rearranges the tree later (a target with `..` could be turned
//! outward by replacing a folder on its way with a link).

use std::path::{Component, Path};

use anyhow::{Context, Result};
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorType, ErrorCode, Host, HostDescriptor, OpenFlags, PathFlags,
};

use super::call::CallState;

/// The `wasi:filesystem/types` instance as wasmtime-wasi 48 links it (guests built against any
/// 0.2.x match it).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replaces `descriptor.symlink-at` with the checked version. Call after WASI is linked.
pub fn add_to_linker(linker: &mut Linker<CallState>) -> Result<()> {
    linker.allow_shadowing(true);
    let mut instance = linker
        .instance(FILESYSTEM_TYPES)
        .map_err(anyhow::Error::from)
        .context("cannot open the WASI filesystem instance")?;
    instance
        .func_wrap_async(
            "[method]descriptor.symlink-at",
            |mut store, (fd, target, link): (Resource<Descriptor>, String, String)| {
                Box::new(async move {
                    let state: &mut CallState = store.data_mut();
                    if !state.symlink_target_allowed(&target) {
                        tracing::warn!(plugin = %state.plugin_label(), link = %super::bounds::log_line(&link), target = %super::bounds::log_line(&target), "refused a symlink whose target leads out of the workdir");
                        return Ok((Err(ErrorCode::NotPermitted),));
                    }
                    let mut view = state.filesystem();
                    match HostDescriptor::symlink_at(&mut view, fd, target, link).await {
                        Ok(()) => Ok((Ok(()),)),
                        Err(err) => Ok((Err(view.convert_error_code(err)?),)),
                    }
                })
            },
        )
        .map_err(anyhow::Error::from)
        .context("cannot link the symlink guard")?;
    instance
        .func_wrap_async(
            "[method]descriptor.open-at",
            |mut store,
             (fd, path_flags, path, open_flags, flags): (
                Resource<Descriptor>,
                PathFlags,
                String,
                OpenFlags,
                DescriptorFlags,
            )| {
                Box::new(async move {
                    let state: &mut CallState = store.data_mut();
                    let mut view = state.filesystem();
                    // What is there now (a missing file is left to open-at: it may create it).
                    let probe = Resource::<Descriptor>::new_borrow(fd.rep());
                    if let Ok(stat) =
                        HostDescriptor::stat_at(&mut view, probe, path_flags, path.clone()).await
                        && !matches!(
                            stat.type_,
                            DescriptorType::RegularFile
                                | DescriptorType::Directory
                                | DescriptorType::SymbolicLink
                        )
                    {
                        return Ok((Err(ErrorCode::NotPermitted),));
                    }
                    match HostDescriptor::open_at(
                        &mut view, fd, path_flags, path, open_flags, flags,
                    )
                    .await
                    {
                        Ok(opened) => Ok((Ok(opened),)),
                        Err(err) => Ok((Err(view.convert_error_code(err)?),)),
                    }
                })
            },
        )
        .map_err(anyhow::Error::from)
        .context("cannot link the open guard")?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Whether a symlink to `target` (as the guest wrote it) may be created in a call whose workdir
/// is `workdir`: relative and downward only, or absolute and inside the workdir.
pub fn target_allowed(workdir: Option<&Path>, target: &str) -> bool {
    let path = Path::new(target);
    let downward = path.components().all(|c| {
        matches!(
            c,
            Component::Normal(_) | Component::CurDir | Component::RootDir
        )
    });
    if !downward || target.is_empty() {
        return false;
    }
    if path.is_absolute() {
        return workdir.is_some_and(|workdir| path.starts_with(workdir));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_targets_that_stay_inside_the_workdir_are_allowed() {
        let workdir = Some(Path::new("/work/dir"));
        for ok in ["notes.txt", "sub/notes.txt", "./sub", "/work/dir/sub/x"] {
            assert!(target_allowed(workdir, ok), "{ok}");
        }
        for refused in [
            "../../outside/secret.txt",
            "sub/../../x",
            "..",
            "/etc/passwd",
            "/work/dir/../other",
            "/work/directory",
            "",
        ] {
            assert!(!target_allowed(workdir, refused), "{refused}");
        }
        assert!(!target_allowed(None, "/work/dir/x"));
    }
}
