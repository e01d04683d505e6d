//! plexus's in-process data plane: network namespaces, one netlink socket per
//! namespace, namespace-scoped sysctls, and the built-in drivers built on
//! them. Only the drivers know about CNI (through plexus-cni). Everything
//! runs on the caller's thread, with blocking sockets.
//!
//! - [`netns`]: namespace handles; code that must run *inside* a namespace
//!   runs on the calling thread, moved there and back by a guard (see the
//!   module docs for why).
//! - [`netlink`]: a [`Netlink`] handle per namespace, its socket created
//!   inside the namespace and then driven from the caller's thread; typed
//!   link, address, route and neighbour operations, traffic control
//!   (tbf and ingress qdiscs, redirect filters, ifb devices), and SR-IOV VF
//!   settings through their PF.
//! - [`session`]: one CNI invocation's host handle and pod handles, opened
//!   once and handed to every built-in plugin.
//! - [`sysctl`]: `net.*` sysctls read and written inside a namespace, with
//!   key validation and the reference plugins' rules for dotted interface
//!   names.
//! - [`pci`]: PCI devices in sysfs for SR-IOV: a VF's PF, index, netdev and
//!   driver, and the vfio node of a VF handed to userspace.
//! - [`vdpa`]: vDPA devices, through generic netlink and sysfs.
//! - [`rdma`]: RDMA devices: the one of a netdev or bus device, the
//!   subsystem's namespace mode, moves between namespaces (NETLINK_RDMA).
//! - [`nftables`]: nftables tables written whole and atomically over
//!   netlink (NETLINK_NETFILTER), for MultiNetworkPolicy.
//! - [`probe`]: one ICMP echo from inside a namespace.
//! - [`mac`]: Ethernet MAC addresses.
//! - [`drivers`]: the built-in plugins, each a `plexus_cni::skel::Plugin`,
//!   registered in [`drivers::BUILTINS`]: the interface drivers `bridge`,
//!   `macvlan`, `ipvlan`, `vlan`, `ipoib`, `sriov` and `vdpa`, and the chained
//!   `tuning` and `bandwidth`, in-process versions of the reference and
//!   peer plugins.
//! - [`error`]: the one [`Error`] type, carrying the operation, the object and
//!   the kernel errno.
//!
//! Tests (`cargo test -p plexus-dataplane`, as root) work only in namespaces
//! they create, named `pxt-<pid>-<n>` and deleted on drop even when a test
//! panics; the root namespace is only ever read. `examples/nlbench.rs`
//! measures the hot-path costs (handle opening, veth creation, a bridge-style
//! ADD) in the same way.

pub mod drivers;
pub mod error;
pub mod mac;
pub mod netlink;
pub mod netns;
pub mod nftables;
pub mod pci;
pub mod probe;
pub mod rdma;
pub mod session;
pub mod sysctl;
pub mod vdpa;

pub use error::{Errno, Error, Result};
pub use mac::MacAddr;
pub use netlink::Netlink;
pub use netns::NetNs;
pub use session::Session;
