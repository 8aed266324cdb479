//! The daemon's log file: `daemon.log` in the data dir, next to the log on stderr.
//!
//! The file gets plain text (never ANSI colour), one event per line as on stderr. When a write
//! would take it past its size limit it is rotated: `daemon.log` becomes `daemon.log.1`, which
//! becomes `daemon.log.2` ([`KEPT`] old files; the oldest is dropped).
//!
//! The writer is installed with the tracing subscriber at process start but writes nothing until
//! the daemon [`attach`]es the file, after it holds its data dir: a daemon refused at start (a
//! taken port, another daemon on the data dir) leaves the file alone.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use anyhow::{Context, Result};

/// Old files kept beside the current one: `daemon.log.1` (newer) and `daemon.log.2`.
pub const KEPT: usize = 2;

/// The default size limit of one file.
pub const DEFAULT_MAX_BYTES: u64 = canopy_core::config::LOG_MAX_BYTES;

/// Bytes read from the end of the file to find recent lines.
const TAIL_WINDOW: u64 = 512 * 1024;

struct Rotating {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
}

impl Rotating {
    fn open(path: &Path, max_bytes: u64) -> std::io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let size = file.metadata()?.len();
        Ok(Self {
            path: path.to_path_buf(),
            file,
            size,
            max_bytes: max_bytes.max(1),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        if self.size > 0 && self.size + bytes.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.file.write_all(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        for index in (1..KEPT).rev() {
            let from = rotated(&self.path, index);
            if from.exists() {
                std::fs::rename(&from, rotated(&self.path, index + 1))?;
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))?;
        *self = Self::open(&self.path, self.max_bytes)?;
        Ok(())
    }
}

fn state() -> &'static Mutex<Option<Rotating>> {
    static STATE: OnceLock<Mutex<Option<Rotating>>> = OnceLock::new();
    STATE.get_or_init(|| Mutex::new(None))
}

/// `daemon.log.N`: the N-th older file beside `path`.
pub fn rotated(path: &Path, index: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{index}"));
    PathBuf::from(name)
}

/// From now on, log lines also go to `path` (appended), rotated past `max_bytes`.
pub fn attach(path: &Path, max_bytes: u64) -> Result<()> {
    let file = Rotating::open(path, max_bytes)
        .with_context(|| format!("cannot open the log file {}", path.display()))?;
    *state()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(file);
    Ok(())
}

/// The tracing writer for the file: discards until [`attach`].
#[derive(Debug, Clone, Copy, Default)]
pub struct FileWriter;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for FileWriter {
    type Writer = FileWriter;

    fn make_writer(&'a self) -> Self::Writer {
        *self
    }
}

impl Write for FileWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let mut state = state()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(file) = state.as_mut()
            && let Err(err) = file.write(bytes)
        {
            // Logging cannot report its own failure through the log; stderr still has the line.
            let path = file.path.display().to_string();
            *state = None;
            drop(state);
            eprintln!("canopy: cannot write the log file {path}, no longer writing it: {err}");
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Appends a line saying the daemon refused to start and why, in the log's own format, to a
/// log file no daemon writes (the refused one never opened it). Best effort: a data dir that
/// cannot take it loses only this line.
pub fn append_refusal(path: &Path, why: &str) {
    let line = format!(
        "{}  ERROR canopy_daemon: the daemon refused to start: {}\n",
        canopy_model::time::Timestamp::now(),
        why.replace('\n', "; ")
    );
    use std::os::unix::fs::OpenOptionsExt as _;
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut file| file.write_all(line.as_bytes()));
    if let Err(err) = appended {
        eprintln!(
            "canopy: cannot write the refusal to {}: {err}",
            path.display()
        );
    }
}

/// The file layer's field formatter. A type of its own, so that it never reuses fields the
/// stderr layer formatted (in colour, on a terminal) for a span.
#[derive(Debug, Default)]
pub struct PlainFields(tracing_subscriber::fmt::format::DefaultFields);

impl<'writer> tracing_subscriber::fmt::FormatFields<'writer> for PlainFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'writer>,
        fields: R,
    ) -> std::fmt::Result {
        self.0.format_fields(writer, fields)
    }
}

/// The last `count` lines of the log, oldest first: from `path`, then from the rotated files
/// before it when it holds fewer. Also the current file, open and positioned after what was read
/// (to follow it), when there is one.
pub fn last_lines(path: &Path, count: usize) -> (Vec<String>, Option<File>) {
    let mut current = File::open(path).ok();
    let mut lines: Vec<String> = current
        .as_mut()
        .and_then(|file| read_tail(file).ok())
        .map(|text| text.lines().map(str::to_string).collect())
        .unwrap_or_default();
    for index in 1..=KEPT {
        if lines.len() >= count {
            break;
        }
        let Some(text) = File::open(rotated(path, index))
            .ok()
            .and_then(|mut file| read_tail(&mut file).ok())
        else {
            continue;
        };
        let mut older: Vec<String> = text.lines().map(str::to_string).collect();
        older.append(&mut lines);
        lines = older;
    }
    let skip = lines.len().saturating_sub(count);
    (lines.split_off(skip), current)
}

/// The last `count` warnings and errors in the log (from the newest [`TAIL_WINDOW`] of it),
/// oldest first.
pub fn recent_problems(path: &Path, count: usize) -> Vec<String> {
    let text = File::open(path)
        .and_then(|mut file| read_tail(&mut file))
        .unwrap_or_default();
    let mut problems: Vec<String> = text
        .lines()
        .filter(|line| matches!(line.split_whitespace().nth(1), Some("WARN" | "ERROR")))
        .map(str::to_string)
        .collect();
    let skip = problems.len().saturating_sub(count);
    problems.split_off(skip)
}

/// The newest [`TAIL_WINDOW`] bytes of a file, from its first whole line; leaves the file
/// positioned after them.
fn read_tail(file: &mut File) -> std::io::Result<String> {
    let len = file.metadata()?.len();
    let start = len.saturating_sub(TAIL_WINDOW);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    std::io::Read::by_ref(file)
        .take(TAIL_WINDOW)
        .read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    if start > 0 {
        // Cut the partial first line.
        return Ok(text
            .split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap_or_default());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_full_file_rotates_and_keeps_two_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        let mut log = Rotating::open(&path, 20).unwrap();
        for line in ["one 12345\n", "two 12345\n", "three 123\n", "four 1234\n"] {
            log.write(line.as_bytes()).unwrap();
        }
        log.write(b"five 1234\n").unwrap();
        log.write(b"six 12345\n").unwrap();
        log.write(b"seven 123\n").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "seven 123\n");
        assert_eq!(
            std::fs::read_to_string(rotated(&path, 1)).unwrap(),
            "five 1234\nsix 12345\n"
        );
        assert_eq!(
            std::fs::read_to_string(rotated(&path, 2)).unwrap(),
            "three 123\nfour 1234\n"
        );
        assert!(!rotated(&path, 3).exists());
        assert_eq!(
            last_lines(&path, 3).0,
            ["five 1234", "six 12345", "seven 123"]
        );
        assert_eq!(last_lines(&path, 100).0.len(), 5);
    }

    #[test]
    fn recent_problems_are_the_last_warnings_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("daemon.log");
        std::fs::write(
            &path,
            "t  INFO fine\nt  WARN first\nt ERROR second\nt  INFO WARN in text\nt  WARN third\n",
        )
        .unwrap();
        assert_eq!(
            recent_problems(&path, 2),
            ["t ERROR second", "t  WARN third"]
        );
    }
}
