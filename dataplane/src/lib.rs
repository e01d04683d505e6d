//! plexus's in-process data plane: network namespaces, one netlink socket per
//! namespace, and the built-in drivers behind one trait.
