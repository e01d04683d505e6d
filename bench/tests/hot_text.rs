//! bench/hot-text/hot-text-gcc, the musl target's linker: the listed
//! functions of the dist plexus binary (`cargo dist`) come first in .text,
//! in the list's order, and every other link is left alone. And the list
//! still names the binary's functions.

use std::path::{Path, PathBuf};
use std::process::Command;

fn wrapper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-text/hot-text-gcc")
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A C program of five functions, each in its own section as rustc emits
/// them, compiled to `dir/prog.o`.
fn object(dir: &Path) -> PathBuf {
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) int one(int x) { return x + 1; }\n\
         __attribute__((noinline)) int two(int x) { return x * 2; }\n\
         __attribute__((noinline)) int three(int x) { return x - 3; }\n\
         __attribute__((noinline)) int four(int x) { return x ^ 4; }\n\
         int main(int c, char **v) { (void)v; return one(c) + two(c) + three(c) + four(c); }\n",
    )
    .unwrap();
    let obj = dir.join("prog.o");
    let status = Command::new("cc")
        .args(["-c", "-O1", "-ffunction-sections", "-o"])
        .arg(&obj)
        .arg(&src)
        .status()
        .unwrap();
    assert!(status.success());
    obj
}

/// Links `obj` through the wrapper to `out` with `list`; the functions of
/// the result by address.
fn link(obj: &Path, out: &Path, list: &Path) -> Vec<String> {
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let status = Command::new(wrapper())
        .env("PLEXUS_HOT_TEXT_LIST", list)
        .arg("-o")
        .arg(out)
        .arg(obj)
        .status()
        .unwrap();
    assert!(status.success());
    let nm = Command::new("nm")
        .args(["-n", "--defined-only"])
        .arg(out)
        .output()
        .unwrap();
    String::from_utf8(nm.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| match l.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "T" | "t", name] if ["one", "two", "three", "four", "main"].contains(&name) => {
                Some(name.to_string())
            }
            _ => None,
        })
        .collect()
}

#[test]
fn listed_functions_come_first_in_list_order_in_the_dist_binary_only() {
    if !["cc", "objcopy", "readelf", "c++filt", "nm"]
        .iter()
        .all(|t| have(t))
    {
        eprintln!("skipped: needs cc and binutils");
        return;
    }
    let dir = std::env::temp_dir().join(format!("plexus-hot-text-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let list = dir.join("functions.txt");
    std::fs::write(
        &list,
        "# comments and unknown names are skipped\nfour\ngone::function\ntwo\n",
    )
    .unwrap();

    let plain = link(&object(&dir), &dir.join("release/deps/plexus-0123"), &list);
    assert_eq!(
        plain,
        ["one", "two", "three", "four", "main"],
        "not the dist binary: unchanged"
    );
    let other = link(
        &object(&dir),
        &dir.join("dist/deps/plexus_bench-0123"),
        &list,
    );
    assert_eq!(
        other,
        ["one", "two", "three", "four", "main"],
        "another binary: unchanged"
    );

    let hot = link(&object(&dir), &dir.join("dist/deps/plexus-0123"), &list);
    assert_eq!(&hot[..2], ["four", "two"], "{hot:?}");
    assert_eq!(hot.len(), 5, "nothing lost: {hot:?}");
    // The binary runs: the renamed sections were linked like the others.
    let run = Command::new(dir.join("dist/deps/plexus-0123"))
        .status()
        .unwrap();
    assert_eq!(run.code(), Some(1 + 1 + 2 + (1 - 3) + (1 ^ 4)));

    // Without the list the link goes on unchanged.
    let missing = link(
        &object(&dir),
        &dir.join("dist/deps/plexus-4567"),
        &dir.join("none.txt"),
    );
    assert_eq!(missing, ["one", "two", "three", "four", "main"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The names of functions.txt, comments and blank lines left out.
fn listed_functions() -> Vec<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("hot-text/functions.txt");
    std::fs::read_to_string(list)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

/// The function symbols of `binary`, named as functions.txt names them
/// (`hot-text-gcc --normalise`).
fn function_symbols(binary: &Path) -> std::collections::HashSet<String> {
    use std::io::Write;
    let nm = Command::new("nm")
        .args(["--defined-only", "--format=just-symbols"])
        .arg(binary)
        .output()
        .unwrap();
    assert!(nm.status.success(), "nm {}", binary.display());
    let mut normalise = Command::new(wrapper())
        .arg("--normalise")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A writer thread: the reader below drains stdout meanwhile.
    let mut stdin = normalise.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(&nm.stdout));
    let out = normalise.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A list whose names are mostly gone gathers little: regenerate it
/// (bench/hot-text/README.md) when this fails.
#[test]
fn most_listed_functions_are_functions_of_the_dist_binary() {
    if !["nm", "c++filt"].iter().all(|t| have(t)) {
        eprintln!("skipped: needs binutils");
        return;
    }
    // The VM runs the test binaries without a toolchain; the unit stage
    // builds the dist binary and runs this.
    if std::env::var_os("CARGO").is_none() && !have("cargo") {
        eprintln!("skipped: needs cargo, to build the dist binary");
        return;
    }
    let plexus = plexus_testkit::dist::build().unwrap_or_else(|e| panic!("{e}"));
    let symbols = function_symbols(&plexus);
    let listed = listed_functions();
    let present = listed.iter().filter(|n| symbols.contains(*n)).count();
    eprintln!(
        "{present} of {} listed functions are in {}",
        listed.len(),
        plexus.display()
    );
    assert!(
        present * 2 >= listed.len(),
        "only {present} of the {} functions in bench/hot-text/functions.txt are symbols of {}: \
         regenerate the list (`sudo target/{}/{}/plexus-bench --hot-functions \
         bench/hot-text/functions.txt`, bench/hot-text/README.md)",
        listed.len(),
        plexus.display(),
        plexus_testkit::dist::TARGET,
        plexus_testkit::dist::PROFILE,
    );
}
