//! The files that hold a running handler's body (`$CANOPY_HOOK_BODY_FILE`, and its stdin).
//!
//! A file per delivery cost an inode allocated and freed on every run (on ext4 about as much
//! as the rest of a `/bin/true` handler's bookkeeping). So the files are slots, reused: a run
//! takes the lowest free slot, writes its body over the slot's file, and gives it back once
//! nothing of the run is left to read it -- a handler whose processes outlive it (`detach =
//! true`) gets a file of its own, removed after the run as before.
//!
//! A slot's file is private to the daemon's user (0600, in the data dir's `tmp/webhooks/`).
//! A handler runs as that user and can replace it, so a slot is opened without following a
//! symlink and used only while it is a plain file with one link; anything else in its place is
//! removed and the file made anew, so a body is never written through a planted link.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt as _, FileExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Bodies up to this size are written on the caller's thread: a small file's write costs less
/// than the hops to the blocking pool and back.
const INLINE_WRITE: usize = 256 * 1024;

/// The slots of one data dir.
#[derive(Debug, Clone)]
pub struct BodyFiles {
    dir: PathBuf,
    /// The free slots, lowest first out, and how many slots there are: there are as many as
    /// handlers ever ran at once.
    free: Arc<Mutex<(BTreeSet<u64>, u64)>>,
}

/// A body written for one run: its path; given back (or removed) when dropped.
#[derive(Debug)]
pub struct BodyFile {
    path: PathBuf,
    /// The slot to give back, or none for a file of the run's own (removed when dropped).
    slot: Option<(u64, BodyFiles)>,
}

impl BodyFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for BodyFile {
    fn drop(&mut self) {
        match self.slot.take() {
            Some((slot, files)) => {
                files
                    .free
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .0
                    .insert(slot);
            }
            None => {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

impl BodyFiles {
    /// The slots in `dir` (made, private, at the first write).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            free: Arc::new(Mutex::new((BTreeSet::new(), 0))),
        }
    }

    /// Writes `body` for a run of delivery `id`: in a slot, or, when the run's processes may
    /// outlive it (`own`), in a file of the run's own.
    pub async fn write(&self, id: &str, body: &[u8], own: bool) -> std::io::Result<BodyFile> {
        let file = if own {
            BodyFile {
                path: self.dir.join(format!("{id}.body")),
                slot: None,
            }
        } else {
            let slot = {
                let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
                match free.0.pop_first() {
                    Some(slot) => slot,
                    None => {
                        free.1 += 1;
                        free.1 - 1
                    }
                }
            };
            BodyFile {
                path: self.dir.join(format!("slot-{slot}.body")),
                slot: Some((slot, self.clone())),
            }
        };
        // Dropped on an error: the slot is free again (its file is rewritten whole next time).
        if body.len() <= INLINE_WRITE {
            write_over(&file.path, body)?;
        } else {
            let (path, body) = (file.path.clone(), body.to_vec());
            tokio::task::spawn_blocking(move || write_over(&path, &body))
                .await
                .map_err(std::io::Error::other)??;
        }
        Ok(file)
    }
}

impl BodyFiles {
    /// Empties the files of the slots no run holds now, so a body does not stay on disk in a
    /// slot that is not taken again (its delivery's record keeps it as long as
    /// `[webhooks] keep_days` says). Runs taking a slot meanwhile wait for it.
    pub fn clear_idle(&self) {
        let free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in &free.0 {
            let path = self.dir.join(format!("slot-{slot}.body"));
            match open_plain(&path) {
                Ok(Some((file, len))) if len > 0 => {
                    if let Err(err) = file.set_len(0) {
                        tracing::warn!(file = %path.display(), error = %err, "cannot empty an idle webhook body file");
                    }
                }
                // Nothing there, or something a run replaces before it writes.
                Ok(_) | Err(_) => {}
            }
        }
    }
}

/// Replaces the content of the private file at `path` with `body`, making the file (and its
/// folder) when missing, and anew when something other than a plain file of one link is there.
fn write_over(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let (file, len) = match open_plain(path)? {
        Some(opened) => opened,
        None => {
            // What is there is removed, a folder too (not followed if it is a link to one):
            // a planted thing must not leave the slot failing every run after.
            let removed = match std::fs::symlink_metadata(path) {
                Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
                Ok(_) => std::fs::remove_file(path),
                Err(err) => Err(err),
            };
            match removed {
                Ok(()) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(err),
            }
            (create(path)?, 0)
        }
    };
    file.write_all_at(body, 0)?;
    if len != body.len() as u64 {
        file.set_len(body.len() as u64)?;
    }
    Ok(())
}

/// The file at `path` opened for writing, and its length, when it is a plain file with one
/// link owned by this user; `None` when something else is there (a symlink is not followed).
fn open_plain(path: &Path) -> std::io::Result<Option<(File, u64)>> {
    let opened = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // A symlink (ELOOP), a folder (EISDIR), a FIFO nobody reads (ENXIO): not a plain file.
        Err(err)
            if matches!(
                err.raw_os_error(),
                Some(libc::ELOOP | libc::EISDIR | libc::ENXIO)
            ) =>
        {
            return Ok(None);
        }
        Err(err) => return Err(err),
    };
    let meta = file.metadata()?;
    // SAFETY: geteuid(2) cannot fail and touches no memory.
    let me = unsafe { libc::geteuid() };
    let plain = meta.file_type().is_file() && meta.nlink() == 1 && meta.uid() == me;
    Ok(plain.then_some((file, meta.len())))
}

/// Makes the file at `path` (which must not exist), private, with its folder when missing.
fn create(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW);
    match options.open(path) {
        Ok(file) => Ok(file),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)?;
            }
            options.open(path)
        }
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(path: &Path) -> Vec<u8> {
        std::fs::read(path).expect("read the body file")
    }

    #[tokio::test]
    async fn slots_are_reused_and_hold_only_the_last_body() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = BodyFiles::new(dir.path().join("bodies"));
        let first = files.write("a", b"a long first body", false).await?;
        let second = files.write("b", b"second", false).await?;
        assert_ne!(
            first.path(),
            second.path(),
            "two runs at once share no file"
        );
        let first_path = first.path().to_path_buf();
        drop(first);
        let third = files.write("c", b"short", false).await?;
        assert_eq!(third.path(), first_path, "the freed slot is taken again");
        assert_eq!(
            read(third.path()),
            b"short",
            "nothing of the longer body is left"
        );
        let mode = std::fs::metadata(third.path())?.mode() & 0o777;
        assert_eq!(mode, 0o600);
        Ok(())
    }

    #[tokio::test]
    async fn idle_slots_are_emptied_and_taken_ones_left_alone() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = BodyFiles::new(dir.path().join("bodies"));
        let idle = files.write("a", b"an idle body", false).await?;
        let taken = files.write("b", b"a taken body", false).await?;
        let idle_path = idle.path().to_path_buf();
        drop(idle);
        files.clear_idle();
        assert_eq!(read(&idle_path), b"", "an idle slot kept its body");
        assert_eq!(read(taken.path()), b"a taken body");
        Ok(())
    }

    #[tokio::test]
    async fn a_file_of_its_own_is_removed_after_the_run() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = BodyFiles::new(dir.path().join("bodies"));
        let own = files.write("d1", b"body", true).await?;
        let path = own.path().to_path_buf();
        assert_eq!(read(&path), b"body");
        drop(own);
        assert!(!path.exists());
        Ok(())
    }

    #[tokio::test]
    async fn a_planted_symlink_hard_link_or_folder_is_replaced_not_written_through()
    -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let files = BodyFiles::new(dir.path().join("bodies"));
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious")?;

        let slot = files.write("x", b"one", false).await?;
        let path = slot.path().to_path_buf();
        drop(slot);
        // A handler replaced its body file with a symlink to another file.
        std::fs::remove_file(&path)?;
        std::os::unix::fs::symlink(&victim, &path)?;
        let slot = files.write("y", b"two", false).await?;
        assert_eq!(slot.path(), path);
        assert_eq!(read(&victim), b"precious", "written through a symlink");
        assert!(!std::fs::symlink_metadata(&path)?.file_type().is_symlink());
        assert_eq!(read(&path), b"two");
        drop(slot);

        // ... with a hard link to it.
        std::fs::remove_file(&path)?;
        std::fs::hard_link(&victim, &path)?;
        let slot = files.write("z", b"three", false).await?;
        assert_eq!(read(&victim), b"precious", "written through a hard link");
        assert_eq!(read(slot.path()), b"three");
        drop(slot);

        // ... and with a folder holding a link to the victim: the slot works again, and the
        // victim is untouched.
        std::fs::remove_file(&path)?;
        std::fs::create_dir(&path)?;
        std::os::unix::fs::symlink(&victim, path.join("inside"))?;
        let slot = files.write("w", b"four", false).await?;
        assert_eq!(read(slot.path()), b"four");
        assert_eq!(read(&victim), b"precious", "the folder's link was followed");
        Ok(())
    }
}
