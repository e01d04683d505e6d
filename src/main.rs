// musl's own malloc returns memory to the kernel eagerly and makes a plugin
// call's thousands of small allocations slow; dlmalloc (pure Rust) keeps
// glibc's speed without glibc's start-up (see .cargo/config.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

fn main() {
    std::process::exit(plexus::cli::main());
}
