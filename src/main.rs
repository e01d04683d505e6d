// musl's own malloc returns memory to the kernel eagerly and makes a plugin
// call's thousands of small allocations slow; dlmalloc (pure Rust) keeps
// glibc's speed without glibc's start-up (see .cargo/config.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

// The musl target's linker orders the release artifact's code by this list
// (bench/hot-text/README.md); naming it here makes cargo relink the binary
// when the list changes. Unused, so not in the binary.
#[cfg(target_env = "musl")]
const _HOT_FUNCTIONS: &str = include_str!("../bench/hot-text/functions.txt");

fn main() {
    use plexus::cli::Outcome;
    plexus::phases::start();
    let code = match plexus::cli::main() {
        Outcome::PluginCall(code) => code,
        Outcome::Done(text) => {
            if !text.is_empty() {
                println!("{text}");
            }
            0
        }
        Outcome::Failed { command, error } => {
            eprintln!("plexus {command}: {error}");
            1
        }
    };
    plexus::phases::finish();
    std::process::exit(code);
}
