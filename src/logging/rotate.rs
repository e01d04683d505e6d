//! `logFile` with `logOptions`: a log file that many plexus processes append
//! to at once (one per CNI call), rotated by size as Multus's lumberjack
//! rotates it. When a write would take the file past `maxSize` megabytes,
//! the file is renamed to `<name>-<UTC timestamp><ext>` (`plexus.log` →
//! `plexus-2026-11-25T14-30-00.000.log`) and a new one started; then backups
//! beyond `maxBackups` (newest kept) or older than `maxAge` days (by the
//! timestamp in their name) are removed, and the others gzipped
//! (`….log.gz`) when `compress` is set. 0 for `maxBackups` or `maxAge` means
//! no limit, as in lumberjack.
//!
//! Neither `file-rotate` nor `logroller` fits: both assume one writer
//! process (file-rotate asserts on a file another process renamed), and
//! each limits backups by count or by age, not both.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use jiff::Timestamp;

use crate::cni::flock::{lock_exclusive, LockError};

/// How long a rotation waits for another process's.
const ROTATION_LOCK_WAIT: Duration = Duration::from_secs(5);

/// `logOptions`, validated; Multus's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// Rotate before the file would grow past this many bytes.
    pub max_size: u64,
    /// Remove backups older than this; `None`: keep them whatever their age.
    pub max_age: Option<Duration>,
    /// Keep at most this many backups; `None`: keep them all.
    pub max_backups: Option<usize>,
    /// gzip rotated files.
    pub compress: bool,
}

pub const MEGABYTE: u64 = 1024 * 1024;
pub const DAY: Duration = Duration::from_secs(24 * 3600);

impl Default for Rotation {
    /// Multus's `SetLogOptions` defaults: 100 MB, 5 days, 5 backups, gzip.
    fn default() -> Rotation {
        Rotation {
            max_size: 100 * MEGABYTE,
            max_age: Some(5 * DAY),
            max_backups: Some(5),
            compress: true,
        }
    }
}

/// The timestamp in a backup's name (lumberjack's `2006-01-02T15-04-05.000`).
const BACKUP_TIME: &str = "%Y-%m-%dT%H-%M-%S%.3f";

/// An open log file and its rotation.
pub struct RotatingFile {
    path: PathBuf,
    rotation: Rotation,
    file: File,
}

impl RotatingFile {
    /// Open (create, mode 0600, with its directory) `path` for appending.
    pub fn open(path: &Path, rotation: Rotation) -> io::Result<RotatingFile> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        Ok(RotatingFile {
            path: path.to_path_buf(),
            rotation,
            file: open_append(path)?,
        })
    }

    /// Append `line` (one whole event: one write, so the lines of processes
    /// writing at once do not interleave), rotating first when it would not
    /// fit.
    pub fn append(&mut self, line: &[u8]) -> io::Result<()> {
        if self.file.metadata()?.len() + line.len() as u64 > self.rotation.max_size {
            self.rotate(line.len() as u64)?;
        }
        self.file.write_all(line)
    }

    /// Rotate unless another process just did. Rotations are serialized by
    /// a lock on the file being rotated; the one that takes the lock after a
    /// rotation finds the path is another file now and appends to that.
    fn rotate(&mut self, incoming: u64) -> io::Result<()> {
        // Bounded: a rotation holds it for a rename and an open, and a stuck
        // process must not stop this one's calls (the line is then lost, and
        // the sink says so).
        let locked =
            lock_exclusive(self.file.try_clone()?, ROTATION_LOCK_WAIT).map_err(|e| match e {
                LockError::Timeout => io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("another process held the rotation lock for {ROTATION_LOCK_WAIT:?}"),
                ),
                LockError::Os(errno) => io::Error::from(errno),
            })?;
        let ours = self.file.metadata()?;
        let current = match std::fs::metadata(&self.path) {
            Ok(m) => Some(m),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        if current.is_none_or(|c| (c.dev(), c.ino()) != (ours.dev(), ours.ino())) {
            drop(locked);
            self.file = open_append(&self.path)?;
            if self.file.metadata()?.len() + incoming <= self.rotation.max_size {
                return Ok(());
            }
            return self.rotate(incoming);
        }
        let backup = self.free_backup_name(Timestamp::now())?;
        std::fs::rename(&self.path, &backup)?;
        self.file = open_append(&self.path)?;
        drop(locked);
        self.prune()
    }

    /// `<stem>-<time><ext>` for `now`, a millisecond later while taken (a
    /// file filled within one millisecond).
    fn free_backup_name(&self, now: Timestamp) -> io::Result<PathBuf> {
        let names = Names::of(&self.path);
        let mut time = now;
        for _ in 0..1000 {
            let candidate = names.backup(time);
            let gz = gz_path(&candidate);
            if !candidate.exists() && !gz.exists() {
                return Ok(candidate);
            }
            time = time
                .checked_add(jiff::SignedDuration::from_millis(1))
                .map_err(io::Error::other)?;
        }
        Err(io::Error::other("no free backup name"))
    }

    /// lumberjack's `millRunOnce`: the count and age limits, then gzip.
    fn prune(&self) -> io::Result<()> {
        let names = Names::of(&self.path);
        let mut backups = names.backups()?;
        // Newest first.
        backups.sort_by_key(|b| std::cmp::Reverse(b.time));
        let cutoff = self
            .rotation
            .max_age
            .and_then(|age| Timestamp::now().checked_sub(age).ok());
        let mut kept = 0;
        let mut first_error = None;
        for backup in backups {
            let too_many = self.rotation.max_backups.is_some_and(|max| kept >= max);
            let too_old = cutoff.is_some_and(|c| backup.time < c);
            let outcome = if too_many || too_old {
                std::fs::remove_file(&backup.path)
            } else {
                kept += 1;
                if self.rotation.compress && !backup.compressed {
                    compress(&backup.path)
                } else {
                    Ok(())
                }
            };
            if let Err(e) = outcome {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

fn gz_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".gz");
    PathBuf::from(name)
}

/// gzip `path` into `path.gz` (through a temporary name, so a process that
/// dies halfway leaves the backup whole) and remove it.
fn compress(path: &Path) -> io::Result<()> {
    let gz = gz_path(path);
    let mut partial = gz.as_os_str().to_owned();
    partial.push(".tmp");
    let partial = PathBuf::from(partial);
    let mut encoder =
        flate2::write::GzEncoder::new(open_new(&partial)?, flate2::Compression::fast());
    io::copy(&mut File::open(path)?, &mut encoder)?;
    encoder.finish()?.sync_all()?;
    std::fs::rename(&partial, &gz)?;
    std::fs::remove_file(path)
}

fn open_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

/// How a log file's backups are named.
struct Names<'a> {
    dir: &'a Path,
    /// `plexus` of `plexus.log`.
    stem: String,
    /// `.log` of `plexus.log`; empty without an extension.
    ext: String,
}

struct Backup {
    path: PathBuf,
    time: Timestamp,
    compressed: bool,
}

impl<'a> Names<'a> {
    fn of(path: &'a Path) -> Names<'a> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (stem, ext) = match name.rfind('.') {
            Some(dot) if dot > 0 => (name[..dot].to_string(), name[dot..].to_string()),
            _ => (name, String::new()),
        };
        Names {
            dir: path
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new(".")),
            stem,
            ext,
        }
    }

    fn backup(&self, time: Timestamp) -> PathBuf {
        let time = time.strftime(BACKUP_TIME);
        self.dir.join(format!("{}-{time}{}", self.stem, self.ext))
    }

    /// The backups in the directory: names of the form [`Names::backup`]
    /// makes, gzipped or not; other files are left alone.
    fn backups(&self) -> io::Result<Vec<Backup>> {
        let prefix = format!("{}-", self.stem);
        let mut found = Vec::new();
        for entry in std::fs::read_dir(self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let (name_plain, compressed) = match name.strip_suffix(".gz") {
                Some(plain) => (plain, true),
                None => (name, false),
            };
            let Some(time) = name_plain
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(&self.ext))
                .and_then(parse_backup_time)
            else {
                continue;
            };
            found.push(Backup {
                path: entry.path(),
                time,
                compressed,
            });
        }
        Ok(found)
    }
}

fn parse_backup_time(text: &str) -> Option<Timestamp> {
    // `%.3f` parses as an optional fraction: require the full shape.
    if text.len() != "2006-01-02T15-04-05.000".len() {
        return None;
    }
    jiff::fmt::strtime::parse(BACKUP_TIME, text)
        .ok()?
        .to_datetime()
        .ok()?
        .to_zoned(jiff::tz::TimeZone::UTC)
        .ok()
        .map(|z| z.timestamp())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rotation(max_size: u64) -> Rotation {
        Rotation {
            max_size,
            max_age: None,
            max_backups: None,
            compress: false,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn backup_names_are_lumberjacks_and_parse_back() {
        let names = Names::of(Path::new("/var/log/plexus.log"));
        let time: Timestamp = "2026-11-25T14:30:05.123Z".parse().unwrap();
        let backup = names.backup(time);
        assert_eq!(
            backup,
            Path::new("/var/log/plexus-2026-11-25T14-30-05.123.log")
        );
        assert_eq!(parse_backup_time("2026-11-25T14-30-05.123"), Some(time));
        assert_eq!(parse_backup_time("2026-11-25T14-30-05"), None);
        let bare = Names::of(Path::new("/var/log/plexus"));
        assert_eq!(
            bare.backup(time),
            Path::new("/var/log/plexus-2026-11-25T14-30-05.123")
        );
    }

    #[test]
    fn rotates_before_a_line_would_pass_max_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plexus.log");
        let mut log = RotatingFile::open(&path, rotation(10)).unwrap();
        log.append(b"1234\n").unwrap();
        log.append(b"5678\n").unwrap();
        assert_eq!(files(dir.path()), ["plexus.log"]);
        log.append(b"abc\n").unwrap();
        let names = files(dir.path());
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "abc\n");
        let backup = dir.path().join(&names[0]);
        assert_eq!(
            std::fs::read_to_string(backup).unwrap(),
            "1234\n5678\n",
            "whole lines only"
        );
    }

    #[test]
    fn keeps_max_backups_newest_and_gzips_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plexus.log");
        let mut log = RotatingFile::open(
            &path,
            Rotation {
                max_backups: Some(2),
                compress: true,
                ..rotation(4)
            },
        )
        .unwrap();
        for line in ["a1\n", "b2\n", "c3\n", "d4\n", "e5\n"] {
            log.append(line.as_bytes()).unwrap();
        }
        let names = files(dir.path());
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names[..2].iter().all(|n| n.ends_with(".log.gz")),
            "{names:?}"
        );
        let gunzip = |name: &str| {
            let mut text = String::new();
            io::Read::read_to_string(
                &mut flate2::read::GzDecoder::new(File::open(dir.path().join(name)).unwrap()),
                &mut text,
            )
            .unwrap();
            text
        };
        // The two newest backups: the oldest ("a1", "b2") are gone.
        assert_eq!(gunzip(&names[0]), "c3\n");
        assert_eq!(gunzip(&names[1]), "d4\n");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "e5\n");
    }

    #[test]
    fn max_age_removes_old_backups_and_leaves_other_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plexus.log");
        let names = Names::of(&path);
        let old: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
        std::fs::write(names.backup(old), "old\n").unwrap();
        std::fs::write(dir.path().join("plexus-notes.log"), "mine\n").unwrap();
        let mut log = RotatingFile::open(
            &path,
            Rotation {
                max_age: Some(DAY),
                ..rotation(4)
            },
        )
        .unwrap();
        log.append(b"a1\n").unwrap();
        log.append(b"b2\n").unwrap();
        let left = files(dir.path());
        assert_eq!(left.len(), 3, "{left:?}");
        assert!(!left.iter().any(|n| n.contains("2020")), "{left:?}");
        assert!(left.contains(&"plexus-notes.log".to_string()));
    }

    #[test]
    fn a_writer_whose_file_was_rotated_by_another_appends_to_the_new_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plexus.log");
        let mut first = RotatingFile::open(&path, rotation(12)).unwrap();
        let mut second = RotatingFile::open(&path, rotation(12)).unwrap();
        first.append(b"aaaaaaaa\n").unwrap();
        first.append(b"bbbb\n").unwrap(); // rotates
                                          // Its file is the backup now, too full for the line; the new one
                                          // has room: no second rotation.
        second.append(b"cccc\n").unwrap();
        assert_eq!(files(dir.path()).len(), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "bbbb\ncccc\n");
    }
}
