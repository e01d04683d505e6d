//! One CNI invocation's data-plane handles (netavark's model): the caller
//! opens the namespaces and netlink sockets once and hands them to every
//! built-in plugin of every attachment, instead of each plugin opening its
//! own.
//!
//! A [`Session`] owns the host's netlink handle and, per
//! pod namespace, its open namespace file and netlink handle. Each is opened
//! on first use and kept until the session drops, so a pod with a bridge,
//! tuning and bandwidth chain on three networks opens one pod socket and one
//! host socket, where each plugin used to open its own (the sockets are
//! blocking, see [`crate::netlink`]).
//!
//! The host is the namespace of the thread that first asks for it: plexus
//! runs in the node's namespace, tests on a thread inside the namespace that
//! plays the node. A session is therefore used from one namespace only.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use elsa::sync::FrozenVec;

use crate::error::Result;
use crate::netlink::Netlink;
use crate::netns::{NetNs, PodNetns};

/// A pod's namespace, and its netlink handle once a plugin asked for it
/// ([`Session::pod_netlink`]): the executor's check of `CNI_NETNS` opens the
/// namespace for the plugins, and a chain of exec'd plugins opens no socket.
#[derive(Debug)]
pub struct PodSide {
    pub ns: NetNs,
    nl: OnceLock<Netlink>,
}

/// What a `CNI_NETNS` turned out to be, with the pod's handles.
pub enum PodLookup<'s> {
    Pod(&'s PodSide),
    /// No namespace (any more): what DEL must tolerate.
    Gone,
    /// The caller's own namespace, the node's (see [`PodNetns::Node`]).
    Node,
}

/// The handles of one CNI invocation, opened on first use.
#[derive(Default)]
pub struct Session {
    host: OnceLock<Netlink>,
    /// Append-only, so references to its entries live as long as the
    /// session; `opening` keeps two threads from opening one namespace twice.
    pods: FrozenVec<Box<PodSide>>,
    opening: Mutex<()>,
    /// Paths whose adopted namespace ([`Session::adopt`]) is the node's.
    node_paths: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("pods", &self.pods.len())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub fn new() -> Session {
        Session::default()
    }

    /// The host's handle: a socket in the calling thread's namespace.
    pub fn host(&self) -> Result<&Netlink> {
        if let Some(nl) = self.host.get() {
            return Ok(nl);
        }
        let nl = Netlink::current()?;
        Ok(self.host.get_or_init(|| nl))
    }

    /// The pod namespace at `path`, opened once.
    pub fn pod(&self, path: &Path) -> Result<PodLookup<'_>> {
        if let Some(side) = self.opened(path) {
            return Ok(PodLookup::Pod(side));
        }
        let _one_at_a_time = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(side) = self.opened(path) {
            return Ok(PodLookup::Pod(side));
        }
        if self.adopted_node(path) {
            return Ok(PodLookup::Node);
        }
        let ns = match NetNs::open_pod(path)? {
            PodNetns::Pod(ns) => ns,
            PodNetns::Gone => return Ok(PodLookup::Gone),
            PodNetns::Node(_) => return Ok(PodLookup::Node),
        };
        Ok(PodLookup::Pod(self.pods.push_get(Box::new(PodSide {
            ns,
            nl: OnceLock::new(),
        }))))
    }

    /// Take `ns`, opened by someone else, as the namespace its path names:
    /// [`Session::pod`] of that path answers with it and opens nothing. In
    /// thick mode the shim opens `CNI_NETNS` on the node and passes the
    /// descriptor, since the daemon's own mounts need not reach the path.
    pub fn adopt(&self, ns: NetNs) -> Result<()> {
        let path = ns.path().to_path_buf();
        let _one_at_a_time = self.opening.lock().unwrap_or_else(|p| p.into_inner());
        if self.opened(&path).is_some() {
            return Ok(());
        }
        match ns.as_pod()? {
            PodNetns::Pod(ns) => {
                self.pods.push(Box::new(PodSide {
                    ns,
                    nl: OnceLock::new(),
                }));
            }
            PodNetns::Node(_) => self
                .node_paths
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(path),
            PodNetns::Gone => {}
        }
        Ok(())
    }

    fn adopted_node(&self, path: &Path) -> bool {
        let node = self.node_paths.lock().unwrap_or_else(|p| p.into_inner());
        node.iter().any(|p| p == path)
    }

    /// The netlink handle of a pod namespace this session opened, created
    /// on first use.
    pub fn pod_netlink<'s>(&'s self, side: &'s PodSide) -> Result<&'s Netlink> {
        if let Some(nl) = side.nl.get() {
            return Ok(nl);
        }
        let nl = Netlink::open(&side.ns)?;
        Ok(side.nl.get_or_init(|| nl))
    }

    fn opened(&self, path: &Path) -> Option<&PodSide> {
        (0..self.pods.len())
            .filter_map(|i| self.pods.get(i))
            .find(|side| side.ns.path() == path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_namespace_is_gone_and_not_kept() {
        let s = Session::new();
        let path = Path::new("/nonexistent/plexus-session-test");
        assert!(matches!(s.pod(path).unwrap(), PodLookup::Gone));
        assert_eq!(s.pods.len(), 0);
    }

    #[test]
    fn an_adopted_namespace_answers_for_a_path_that_does_not_exist() {
        let s = Session::new();
        let path = PathBuf::from("/nonexistent/plexus-adopted");
        let own = std::fs::File::open("/proc/self/ns/net").unwrap();
        let node = NetNs::from_fd(own.into(), path.clone()).unwrap();
        s.adopt(node).unwrap();
        assert!(matches!(s.pod(&path).unwrap(), PodLookup::Node));
        assert_eq!(s.pods.len(), 0);
    }

    #[test]
    fn the_callers_own_namespace_is_the_node() {
        let s = Session::new();
        assert!(matches!(
            s.pod(Path::new("/proc/self/ns/net")).unwrap(),
            PodLookup::Node
        ));
    }
}
