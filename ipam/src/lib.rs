//! plexus's IP address management: host-local in the reference plugin's on-disk
//! format, and static.
