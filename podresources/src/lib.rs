//! kubelet's PodResources API v1 (`k8s.io/kubelet/pkg/apis/podresources/v1`):
//! which devices kubelet's device plugins allocated to which pod's
//! containers. plexus reads it to learn the SR-IOV VF (or other device) each
//! network backed by a device-plugin resource is to use (device-info-SPEC
//! §4.2.1); the test kit serves the same messages as a stand-in kubelet.
//!
//! - [`v1`]: the messages, with the proto's field numbers.
//! - [`client`]: gRPC over kubelet's unix socket, every call bounded.

pub mod client;
pub mod v1;

/// gRPC over a unix socket, for the test kit's device plugin too.
pub use client::{grpc_over_unix, unary, UnixChannel};
pub use client::{Client, Error};
/// The gRPC status codes of [`Error::Refused`].
pub use tonic::Code;
