//! The Kubernetes Network Custom Resource Definition De-facto Standard v1.3
//! (multi-net-spec-v1.3.txt): NetworkAttachmentDefinition (§3), the selection
//! annotation (§4), the status annotation (§5) and IPAMClaim (§8), plus the
//! device information of device-info-SPEC.md.

pub use plexus_cni::deviceinfo;
pub(crate) use plexus_cni::go_json;
pub mod error;
pub mod ipamclaim;
pub mod meta;
pub mod nad;
pub mod names;
pub mod pod;
pub mod selection;
pub mod status;
