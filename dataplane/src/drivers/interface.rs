//! The seam every interface driver plugs into. A driver knows how to make
//! one kind of pod link ([`InterfaceDriver`]: parse, create, configure,
//! check, remove); [`InterfacePlugin`] is the one CNI [`Plugin`] around all
//! of them and owns the flow they share:
//!
//! - ADD: parse (nothing touched yet), open the attachment from the
//!   session, prepare (look up, still nothing touched), create the link,
//!   then IPAM allocates, on the same thread (see [`InterfacePlugin`]'s
//!   `add`), configure it from the IPAM result; any failure takes back every
//!   step through the one [`Undo`] log.
//! - device-info: a driver that knows its device describes it
//!   ([`InterfaceDriver::device_info`]) and the description is written to
//!   `runtimeConfig.CNIDeviceInfoFile` (see [`device_info`]).
//! - DEL: the driver removes what it made (with the attachment, or without
//!   it when the namespace is gone), then IPAM releases. DEL reads only the
//!   `ipam` section, so it works for a configuration ADD refused.
//! - CHECK: IPAM's CHECK, then the driver's against the prevResult.
//! - after DEL and in GC, the driver gives back what attachments whose
//!   namespace is gone left without their DEL
//!   ([`InterfaceDriver::hands_over`]).
//! - GC and STATUS: the IPAM plugin's, which holds the leases.

use crate::drivers::error::{sys, DriverError};
use plexus_cni::delegate::Resolver;
use plexus_cni::deviceinfo::DeviceInfo;
use plexus_cni::env::CniCommand;
use plexus_cni::error::CniError;
use plexus_cni::result::CniResult;
use plexus_cni::skel::{Request, TypedPlugin, ValidAttachment};
use serde::Deserialize;

use super::attachment::Attach;
use super::device_info;
use super::netconf::IpamRef;
use super::ownership::{HandsOver, Return};
use super::passthrough::Patience;
use super::undo::Undo;
use crate::drivers::{check, ipam_delegate, netconf};
use crate::netlink::{LinkKind, Netlink};
use crate::session::Session;

/// What every step of an ADD or CHECK gets: the request, its configuration
/// as the driver validated it, and the attachment.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a, C> {
    pub req: &'a Request,
    pub conf: &'a C,
    pub at: &'a Attach<'a>,
}

/// What makes one kind of pod link.
pub(crate) trait InterfaceDriver: Sync {
    /// The validated configuration.
    type Conf: Sync;
    /// What [`prepare`](InterfaceDriver::prepare) finds for
    /// [`create`](InterfaceDriver::create) (a macvlan's master).
    type Prepared: Sync;
    /// What [`create`](InterfaceDriver::create) hands to
    /// [`configure`](InterfaceDriver::configure).
    type Made;

    /// Read and validate the configuration without touching the system, so
    /// a chain can refuse a bad config before anything needs undoing.
    fn parse(&self, req: &Request) -> Result<Self::Conf, DriverError>;

    /// The configuration's `ipam` section.
    fn ipam<'c>(&self, conf: &'c Self::Conf) -> &'c Option<IpamRef>;

    /// Look up what the link needs from the system, changing nothing: it
    /// runs before IPAM allocates, so that a refusal here has nothing to
    /// undo.
    fn prepare(&self, call: &Call<'_, Self::Conf>) -> Result<Self::Prepared, DriverError>;

    /// Make the pod's link (and whatever it hangs on), registering in `undo`
    /// how to take each step back. IPAM allocates after it.
    fn create<'a>(
        &'a self,
        call: &Call<'a, Self::Conf>,
        prepared: &'a Self::Prepared,
        undo: &mut Undo<'a>,
    ) -> Result<Self::Made, DriverError>;

    /// Address the link from `ipam` (`None` without an IPAM plugin) and
    /// build the result.
    fn configure(
        &self,
        call: &Call<'_, Self::Conf>,
        made: Self::Made,
        ipam: Option<CniResult>,
    ) -> Result<CniResult, DriverError>;

    /// cni-SPEC §2 CHECK: the pod against `prev`, the attachment's
    /// prevResult.
    fn check(&self, call: &Call<'_, Self::Conf>, prev: &CniResult) -> Result<(), DriverError>;

    /// The kind of the link `create` makes in the pod as CNI_IFNAME, which
    /// the default [`remove`](InterfaceDriver::remove) deletes (a link of
    /// that name but another kind was not made by the driver and stays);
    /// `None` for a driver whose `remove` does more.
    const POD_LINK_KIND: Option<LinkKind>;

    /// device-info-SPEC §3: the device behind the link `create` made, for
    /// the attachment's device-info file; `None` for a software link.
    fn device_info(&self, _conf: &Self::Conf, _made: &Self::Made) -> Option<DeviceInfo> {
        None
    }

    /// A driver that hands devices whole to pods (an SR-IOV VF, a vDPA
    /// device): its DEL gives the device back to the node, and, after every
    /// DEL and in GC, so do the devices of pods whose DEL never came.
    fn hands_over(&self) -> Option<&dyn HandsOver> {
        None
    }

    /// cni-SPEC §2 DEL: remove what `create` made, idempotently. `host` is
    /// the node's netlink handle; `at` is `None` when the pod's namespace is
    /// gone (or was never given).
    fn remove(
        &self,
        req: &Request,
        host: &Netlink,
        at: Option<&Attach<'_>>,
    ) -> Result<(), DriverError> {
        if let Some(device) = self.hands_over() {
            return device.take_back(req, Return::from(host, at));
        }
        match (&Self::POD_LINK_KIND, at) {
            (Some(kind), Some(at)) => at.delete_pod_link(kind),
            _ => Ok(()),
        }
    }
}

/// The part DEL, GC and STATUS read; they must not fail on a configuration
/// ADD refused.
#[derive(Debug, Default, Deserialize)]
struct IpamOnly {
    ipam: Option<IpamRef>,
}

/// The CNI plugin around an [`InterfaceDriver`].
pub(crate) struct InterfacePlugin<'r, D> {
    driver: D,
    /// Finds the IPAM plugin named by `ipam.type`.
    resolver: &'r dyn Resolver,
    session: &'r Session,
}

impl<'r, D: InterfaceDriver> InterfacePlugin<'r, D> {
    pub fn new(driver: D, resolver: &'r dyn Resolver, session: &'r Session) -> Self {
        InterfacePlugin {
            driver,
            resolver,
            session,
        }
    }
}

impl<D: InterfaceDriver> TypedPlugin for InterfacePlugin<'_, D> {
    type Error = DriverError;

    fn validate(&self, req: &Request) -> Result<(), DriverError> {
        self.driver.parse(req)?;
        device_info::validate(req)
    }

    fn add(&self, req: &Request) -> Result<CniResult, DriverError> {
        let conf = self.driver.parse(req)?;
        device_info::validate(req)?;
        let at = Attach::open(self.session, req)?;
        let call = Call {
            req,
            conf: &conf,
            at: &at,
        };
        let prepared = self.driver.prepare(&call)?;
        let mut undo = Undo::default();
        // The link work, then IPAM ADD (when there is one), in the reference
        // plugins' order, then configure with both; a failure of any leaves
        // all undone through `undo`. IPAM runs on this thread: host-local's
        // work is a few file operations, cheaper than the thread start and
        // cross-CPU hand-over that running it beside the link work cost
        // (measured: a bridge ADD was 250 µs slower with the thread), and its
        // fsyncs, when it has any, already run in the background of the
        // ADD's [`plexus_cni::durable::Scope`].
        let outcome = (|| {
            let made = self.driver.create(&call, &prepared, &mut undo)?;
            let ipam = if netconf::has_ipam(self.driver.ipam(&conf)) {
                Some(ipam_delegate::ipam_add(self.resolver, req, &mut undo)?)
            } else {
                None
            };
            let info = self.driver.device_info(&conf, &made);
            let result = self.driver.configure(&call, made, ipam)?;
            // The executor owns the file: it removes it on rollback and DEL.
            info.map_or(Ok(()), |info| device_info::publish(req, &info))?;
            Ok(result)
        })();
        undo.finish(outcome)
    }

    fn del(&self, req: &Request) -> Result<(), DriverError> {
        let c: IpamOnly = netconf::decode_config(req)?;
        let at = Attach::open_for_del(self.session, req)?;
        let host = self
            .session
            .host()
            .map_err(sys("netlink in the host namespace"))?;
        self.driver.remove(req, host, at.as_ref())?;
        ipam_delegate::ipam_run(self.resolver, req, &c.ipam, CniCommand::Del)?;
        // Another attachment's leftovers never fail or slow this DEL: the
        // runtime's log gets them, the next DEL or GC tries again.
        if let Some(device) = self.driver.hands_over() {
            if let Err(e) = device.take_back_orphans(req, host, Patience::OneLook) {
                // Logged as a runtime would read it: `msg: details`.
                req.call_log().warn(CniError::from(e));
            }
        }
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), DriverError> {
        let conf = self.driver.parse(req)?;
        let at = Attach::open(self.session, req)?;
        ipam_delegate::ipam_run(
            self.resolver,
            req,
            self.driver.ipam(&conf),
            CniCommand::Check,
        )?;
        let prev = check::prev_result(req)?;
        let call = Call {
            req,
            conf: &conf,
            at: &at,
        };
        self.driver.check(&call, prev)
    }

    fn gc(&self, req: &Request, valid: &[ValidAttachment]) -> Result<(), DriverError> {
        let c: IpamOnly = netconf::decode_config(req)?;
        let host = self
            .session
            .host()
            .map_err(sys("netlink in the host namespace"))?;
        // A device goes back by its owner's namespace, not by `valid`: the
        // driver's data directory is shared by every network using it, and
        // plexus's own GC DELs the attachments not in `valid`. GC runs
        // apart from any pod's call, so it waits for each netdev.
        let orphans = match self.driver.hands_over() {
            Some(device) => device.take_back_orphans(req, host, Patience::Wait),
            None => Ok(()),
        };
        let leases = ipam_delegate::ipam_gc(self.resolver, req, &c.ipam, valid);
        let errors: Vec<DriverError> = [orphans, leases]
            .into_iter()
            .filter_map(Result::err)
            .collect();
        DriverError::all("GC", errors)
    }

    fn status(&self, req: &Request) -> Result<(), DriverError> {
        let c: IpamOnly = netconf::decode_config(req)?;
        ipam_delegate::ipam_run(self.resolver, req, &c.ipam, CniCommand::Status)
    }
}
