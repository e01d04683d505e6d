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
//! - [`dra_v1`], [`pluginregistration`]: the DRA kubelet plugin API and
//!   the plugin registration API, which plexus's DRA driver serves
//!   (`plexus daemon --dra`) and the test kit's stand-in kubelet calls.
//! - [`client`]: gRPC over kubelet's unix socket, every call bounded.
//! - [`server`]: gRPC served on a unix socket, as kubelet's plugins serve.

pub mod client;
pub mod server;
pub mod v1;

/// kubelet's device-plugin API v1beta1 (`proto/deviceplugin_v1beta1.proto`).
pub mod deviceplugin_v1beta1 {
    include!(concat!(env!("OUT_DIR"), "/v1beta1.rs"));
}

/// kubelet's DRA plugin API v1 (`proto/dra_v1.proto`), which plexus's DRA
/// driver serves.
pub mod dra_v1 {
    include!(concat!(
        env!("OUT_DIR"),
        "/k8s.io.kubelet.pkg.apis.dra.v1.rs"
    ));

    /// The service's name in `PluginInfo.supported_versions`.
    pub const SERVICE: &str = "v1.DRAPlugin";
    pub const PREPARE_PATH: &str = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources";
    pub const UNPREPARE_PATH: &str =
        "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources";
}

/// kubelet's plugin registration API v1 (`proto/pluginregistration_v1.proto`).
pub mod pluginregistration {
    include!(concat!(env!("OUT_DIR"), "/pluginregistration.rs"));

    /// `PluginInfo.type` of a DRA driver.
    pub const DRA_PLUGIN: &str = "DRAPlugin";
    pub const GET_INFO_PATH: &str = "/pluginregistration.Registration/GetInfo";
    pub const NOTIFY_PATH: &str = "/pluginregistration.Registration/NotifyRegistrationStatus";
}

/// gRPC over a unix socket, for the test kit's device plugin too.
pub use client::{grpc_over_unix, unary, UnixChannel};
pub use client::{Client, Error};
/// The gRPC status codes of [`Error::Refused`].
pub use tonic::Code;
