//! One attachment's context: `CNI_IFNAME`, and the pod's namespace and
//! netlink handles with the host's, taken from the invocation's
//! [`Session`] (which opens each once), plus what every plugin reads from
//! the request's environment.

use crate::drivers::error::{sys, sys_error, DriverError};
use plexus_cni::env::{CniCommand, CNI_NETNS};

use plexus_cni::names::{IfName, NetnsPath};
use plexus_cni::result::{CniResult, Interface};
use plexus_cni::skel::Request;

use crate::netlink::{Link, LinkKind, Netlink};
use crate::session::{PodLookup, Session};
use crate::NetNs;

/// cni-SPEC §3 "Chained plugins": a chained plugin acts on the result of
/// the plugins before it, so its ADD and CHECK need `prevResult`.
pub(crate) fn chained_prev_result<'a>(
    req: &'a Request,
    plugin: &str,
) -> Result<&'a CniResult, DriverError> {
    req.prev_result.as_ref().ok_or_else(|| {
        DriverError::config(
            "prevResult",
            format!("missing: {plugin} is a chained plugin and works on the result of the plugins before it"),
        )
    })
}

/// One ADD, CHECK or DEL of one attachment: the pod's namespace and a netlink
/// handle on each side.
pub(crate) struct Attach<'s> {
    pub ifname: IfName,
    /// `CNI_NETNS` as given: the `sandbox` of container interfaces.
    pub sandbox: NetnsPath,
    pub pod_ns: &'s NetNs,
    /// The namespace the driver runs in (the node's).
    pub host: &'s Netlink,
    pub pod: &'s Netlink,
}

impl<'s> Attach<'s> {
    /// `link`, a pod interface, as a result reports it.
    pub fn interface_of(&self, link: &Link) -> Interface {
        Interface {
            name: link.name.to_string(),
            mac: link.mac.map(|m| m.to_string()),
            sandbox: Some(self.sandbox.to_string()),
            ..Interface::default()
        }
    }

    /// For ADD and CHECK: the pod's namespace must exist (code 3 if not),
    /// and must not be the node's own.
    pub fn open(session: &'s Session, req: &Request) -> Result<Attach<'s>, DriverError> {
        let path = req
            .env
            .require_attachment()?
            .netns
            .as_ref()
            .ok_or_else(|| DriverError::NoNetns {
                command: req.env.command().to_string(),
            })?;
        Attach::at(session, req, path)?.ok_or_else(|| DriverError::NotANetns { path: path.clone() })
    }

    /// For DEL: `None` when the runtime sent no namespace or it is gone, in
    /// which case everything that lived in it is gone too, or when it is the
    /// node's, where nothing of a pod lives (deleting `CNI_IFNAME` there
    /// would take the node's interface).
    pub fn open_for_del(
        session: &'s Session,
        req: &Request,
    ) -> Result<Option<Attach<'s>>, DriverError> {
        match req.env.require_attachment()?.netns.as_ref() {
            None => Ok(None),
            Some(path) => Attach::at(session, req, path),
        }
    }

    fn at(
        session: &'s Session,
        req: &Request,
        path: &NetnsPath,
    ) -> Result<Option<Attach<'s>>, DriverError> {
        let ifname = req.env.require_attachment()?.ifname.clone();
        let side = match session.pod(path.as_path()).map_err(sys(CNI_NETNS))? {
            PodLookup::Pod(side) => side,
            PodLookup::Gone => return Ok(None),
            PodLookup::Node if req.env.command() == CniCommand::Del => return Ok(None),
            // A pod never has the node's namespace: an ADD there would
            // configure the node itself ([`crate::netns::PodNetns::Node`]).
            PodLookup::Node => return Err(DriverError::NodeNetns { path: path.clone() }),
        };
        let host = session
            .host()
            .map_err(sys("netlink in the host namespace"))?;
        Ok(Some(Attach {
            ifname,
            sandbox: path.clone(),
            pod_ns: &side.ns,
            host,
            pod: session
                .pod_netlink(side)
                .map_err(sys("netlink in CNI_NETNS"))?,
        }))
    }

    /// The container interface as the pod namespace has it now.
    pub fn pod_link(&self) -> Result<Link, DriverError> {
        self.pod
            .link_by_name(&self.ifname)
            .map_err(sys(format_args!(
                "look up {} in the container",
                self.ifname
            )))?
            .ok_or_else(|| {
                sys_error(
                    format_args!("container interface {}", self.ifname),
                    "vanished right after creation",
                )
            })
    }

    /// The container interface, which a chained plugin needs the plugins
    /// before it to have made. Its absence is code 7 in every driver: the
    /// chain (its configuration) does not provide what this plugin acts on,
    /// as bandwidth's "no host-side interface" is; nothing this plugin did
    /// failed (which is what 103 says).
    pub fn existing_pod_link(&self) -> Result<Link, DriverError> {
        self.pod
            .link_by_name(&self.ifname)
            .map_err(sys(format_args!("CNI_IFNAME {}", self.ifname)))?
            .ok_or_else(|| {
                DriverError::config(
                    "CNI_IFNAME",
                    format!("no interface {:?} in {}", self.ifname, self.sandbox),
                )
            })
    }

    /// The error for "CNI_IFNAME is taken in the pod" (cni-SPEC §2 ADD: a
    /// plugin must not overwrite an existing interface).
    pub fn ifname_taken(&self) -> DriverError {
        DriverError::InterfaceTaken {
            ifname: self.ifname.clone(),
            sandbox: self.sandbox.clone(),
        }
    }

    /// After an EEXIST creating a link whose container end is CNI_IFNAME:
    /// whether the container name was the one taken.
    pub fn ifname_exists(&self) -> Result<bool, DriverError> {
        self.pod
            .link_by_name(&self.ifname)
            .map(|l| l.is_some())
            .map_err(sys(format_args!(
                "look up {} in the container",
                self.ifname
            )))
    }

    /// DEL of a container interface the driver made: nothing to do when it
    /// is gone (cni-SPEC §2 DEL). An interface of that name but another kind
    /// than `kind` is not one it made (a pod's `lo`, a device that was there
    /// before a failed ADD): it is left alone.
    pub fn delete_pod_link(&self, kind: &LinkKind) -> Result<(), DriverError> {
        let Some(link) = self
            .pod
            .link_by_name(&self.ifname)
            .map_err(sys(format_args!(
                "look up {} in the container",
                self.ifname
            )))?
        else {
            return Ok(());
        };
        if link.kind.as_ref() != Some(kind) {
            return Ok(());
        }
        self.pod
            .del_link(link.index)
            .map(drop)
            .map_err(sys(format_args!("delete {} in the container", self.ifname)))
    }
}
