//! Links the `plexus` binary as a position-dependent executable.
//!
//! plexus runs as a fresh process for every CNI call, so its start-up is part
//! of every ADD and DEL. A PIE must have its ~5,000 relative relocations
//! applied by the loader on each start, touching (and faulting in) every page
//! that holds a pointer; a non-PIE has them resolved at link time. That saves
//! about a quarter of the page faults and 0.2 ms per invocation (measured with
//! `perf stat` on this machine kind). The Go reference plugins are non-PIE
//! static binaries for the same reason. Only the executables change:
//! libraries and proc-macros keep their PIC code.
fn main() {
    println!("cargo:rustc-link-arg-bins=-no-pie");
}
