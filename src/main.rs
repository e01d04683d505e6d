fn main() {
    std::process::exit(plexus::cli::main());
}
