//! What tests read of the directories plexus and its peers write.

use std::path::Path;

/// The names of the files in `dir` that `keep` accepts, sorted; none when
/// `dir` does not exist (nothing was ever written there).
pub fn names(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<String> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => panic!("read {}: {e}", dir.display()),
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| keep(n))
        .collect();
    names.sort();
    names
}

/// The addresses host-local (or its stand-ins) holds in `dir`: its lease
/// files, named by address.
pub fn leases(dir: &Path) -> Vec<String> {
    names(dir, |n| n.parse::<std::net::IpAddr>().is_ok())
}
