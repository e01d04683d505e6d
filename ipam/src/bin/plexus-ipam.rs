//! plexus's built-in IPAM plugins as a standalone CNI plugin binary, so
//! runtimes (and the tests that play one) can exec them like the reference
//! binaries. The plugin is chosen by the binary's name, as CNI names plugins
//! by their `type`: a name ending in `static` runs `static`, anything else
//! `host-local`.

use std::io;
use std::path::Path;

use plexus_cni::skel::{self, Plugin};
use plexus_ipam::{HostLocal, Static};

fn main() {
    let argv0 = std::env::args_os().next().unwrap_or_default();
    let name = Path::new(&argv0)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let plugin: Box<dyn Plugin> = if name.ends_with("static") {
        Box::new(Static)
    } else {
        Box::new(HostLocal::new())
    };
    let code = skel::run(
        plugin.as_ref(),
        |k| std::env::var(k).ok(),
        &mut io::stdin().lock(),
        &mut io::stdout().lock(),
        &mut io::stderr().lock(),
    );
    std::process::exit(code);
}
