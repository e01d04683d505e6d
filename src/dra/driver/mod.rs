//! plexus as a DRA driver (`plexus daemon --dra`, issue 49 item 2): a
//! kubelet plugin for the node's network devices, named [`DRIVER`].
//!
//! - [`inventory`]: the node's devices it offers (SR-IOV VFs, vDPA
//!   devices, the whole netdevs the administrator names), with the
//!   [`attributes`] DeviceClasses select on;
//! - [`publish`]: those devices as the ResourceSlices of the node's pool;
//! - [`prepare`]: kubelet's `NodePrepareResources` for one claim, checked
//!   against the claim, the node's devices and the [`reservations`], which
//!   keep prepared claims on disk until `NodeUnprepareResources`;
//! - [`cdi`]: the CDI specs that give containers the devices' character
//!   devices;
//! - [`opaque`]: the claim's configuration for plexus's driver, which says
//!   how the sandbox's ADD attaches each device; [`claimed`]: the networks
//!   of the pod's prepared devices, as the planner takes them.
//!
//! All of it is pure or reads only sysfs and its own state directory; the
//! gRPC services and the API server are the daemon's
//! (`crate::commands::daemon::dra`).

pub mod attributes;
pub mod cdi;
pub mod claimed;
pub mod inventory;
pub mod opaque;
pub mod prepare;
pub mod prepared;
pub mod publish;
pub mod reservations;

/// The driver's name: the `driver` of its slices, of claims' allocation
/// results and of the opaque configurations it reads.
pub const DRIVER: &str = "dra.plexus.dev";
