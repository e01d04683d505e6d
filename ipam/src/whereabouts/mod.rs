//! Cluster-wide IPAM with whereabouts' configuration and objects
//! (`"ipam": {"type": "whereabouts"}`): what it reads ([`conf`]), the
//! objects it shares with whereabouts on the API server ([`pool`]), and the
//! pure choice of an address ([`allocate`]) of the addresses of pods
//! that are gone ([`reclaim`]) and of node slices ([`mod@slice`]). The API side, which writes the
//! choice, is plexus's (`plexus::whereabouts::pools`).
//!
//! The invariant, which every writer keeps: an address is held by at most
//! one attachment at a time, because an allocation is added to an IPPool
//! only by a write that names the resourceVersion of the copy it was chosen
//! from (a compare-and-swap); a write that loses is chosen again from a
//! fresh copy. whereabouts' own writes test the same resourceVersion, so
//! the two hold the invariant together.

pub mod allocate;
pub mod conf;
pub mod pool;
pub mod reclaim;
pub mod slice;
