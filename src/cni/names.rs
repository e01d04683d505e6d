//! Name rules of the CNI protocol and the kernel: interface names, container
//! IDs, network names and plugin types.

/// A kernel interface name: 1–15 bytes, not `.` or `..`, no `/`, `:` or
/// whitespace. Returns the reason it is invalid.
// STUB: replaced by the real implementation.
pub fn check_ifname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 15 {
        return Err("bad length".into());
    }
    Ok(())
}
