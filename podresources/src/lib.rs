//! kubelet's gRPC APIs, above all PodResources v1 (`k8s.io/kubelet/pkg/apis/podresources/v1`):
//! which devices kubelet's device plugins allocated to which pod's
//! containers. plexus reads it to learn the SR-IOV VF (or other device) each
//! network backed by a device-plugin resource is to use (device-info-SPEC
//! §4.2.1); the test kit serves the same messages as a stand-in kubelet.
//!
//! - [`v1`]: the messages, with the proto's field numbers (`proto/`, built
//!   by `build.rs`).
//! - [`deviceplugin_v1beta1`]: the device-plugin API's messages, which the
//!   test kit's device plugin speaks to kubelet.
//! - [`client`]: gRPC over kubelet's unix socket, every call bounded.

pub mod client;
pub mod v1;

/// kubelet's device-plugin API v1beta1 (`proto/deviceplugin_v1beta1.proto`).
pub mod deviceplugin_v1beta1 {
    include!(concat!(env!("OUT_DIR"), "/v1beta1.rs"));
}

/// gRPC over a unix socket, for the test kit's device plugin too.
pub use client::{grpc_over_unix, unary, UnixChannel};
pub use client::{Client, Error};
/// The gRPC status codes of [`Error::Refused`].
pub use tonic::Code;
