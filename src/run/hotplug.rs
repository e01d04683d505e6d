//! Hot-plug: attaching networks to a sandbox plexus ADDed, and detaching
//! them, while it runs. The record of the sandbox's ADD stays the truth: a
//! hot-plugged attachment is appended to it and written before its first
//! plugin runs and after its chain, as at ADD, so the sandbox's DEL removes
//! it with the rest, and a plexus killed in the middle leaves a record
//! saying what is owed. A detached attachment leaves the record only once
//! its DEL succeeded.

use std::time::Instant;

use crate::cni::env::CniCommand;
use crate::cni::names::IfName;
use crate::plan::Attachment;
use crate::record::{CachedAttachment, Lookup, Record, RecordError, State};

use super::{del_chain, live_netns, prepare_all, AttachmentResult, Executor, RunContext, RunError};

impl Executor {
    /// The sandbox's record; a sandbox without one is unknown (its DEL came
    /// first, or plexus did not ADD it).
    pub fn record(&self, ctx: &RunContext) -> Result<Record, RunError> {
        match self.cache.load(&ctx.container_id, &ctx.ifname)? {
            Lookup::Found(record) => Ok(record),
            Lookup::Missing => Err(RunError::UnknownContainer {
                container_id: ctx.container_id.clone(),
                ifname: ctx.ifname.clone(),
            }),
            Lookup::Corrupt { path, reason } => Err(RecordError::Corrupt { path, reason }.into()),
        }
    }

    /// ADD `attachments` to the running sandbox of `ctx`, after the ones it
    /// has, all or none: a failure undoes these only (multi-net-spec §7.2),
    /// never the sandbox's other attachments.
    pub fn attach(
        &self,
        ctx: &RunContext,
        attachments: &[Attachment],
    ) -> Result<Vec<AttachmentResult>, RunError> {
        if attachments.is_empty() {
            return Ok(Vec::new());
        }
        let netns = ctx.netns.clone().ok_or(RunError::NoNetns {
            reason: "required for a hot-plug",
        })?;
        let chains = prepare_all(attachments, ctx)?;
        let mut record = self.record(ctx)?;
        if let Some(taken) = attachments.iter().find(|a| {
            record
                .attachments
                .iter()
                .any(|c| c.attachment.ifname == a.ifname)
        }) {
            return Err(RunError::InterfaceTaken {
                network: taken.network.clone(),
                ifname: taken.ifname.clone(),
            });
        }
        let first = record.attachments.len();
        let plan = crate::plan::Plan {
            attachments: attachments.to_vec(),
            warnings: Vec::new(),
            claimed: Vec::new(),
        };
        record
            .attachments
            .extend(Record::new(&ctx.container_id, &ctx.ifname, None, &plan).attachments);
        let added = self.add_from(&mut record, first, &chains, ctx, &netns);
        if added.is_err() {
            // What was undone leaves the record; what is still owed stays
            // for the sandbox's DEL (or the next try, which detaches it).
            let tried = record.attachments.split_off(first);
            record
                .attachments
                .extend(tried.into_iter().filter(CachedAttachment::owes_del));
            self.cache.store(&record)?;
        }
        added
    }

    /// DEL the sandbox's attachment `ifname` alone; it leaves the record
    /// once every plugin's DEL succeeded. The cluster network (the
    /// runtime's `CNI_IFNAME`) is never detached. Detaching what is not
    /// there is done already.
    pub fn detach(
        &self,
        ctx: &RunContext,
        ifname: &IfName,
    ) -> Result<Option<Attachment>, RunError> {
        if *ifname == ctx.ifname {
            return Err(RunError::ClusterInterface {
                ifname: ifname.clone(),
            });
        }
        let mut record = match self.record(ctx) {
            Ok(record) => record,
            Err(RunError::UnknownContainer { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        let Some(position) = record
            .attachments
            .iter()
            .position(|c| c.attachment.ifname == *ifname && !c.attachment.default)
        else {
            return Ok(None);
        };
        let netns = live_netns(ctx).live();
        let cached = &mut record.attachments[position];
        if cached.state == State::Pending {
            cached.pending_del.clear();
        }
        let start = Instant::now();
        let deleted = del_chain(cached, ctx, netns, None);
        self.observe(CniCommand::Del, &cached.attachment, start, deleted.as_ref());
        let detached = cached.attachment.clone();
        if deleted.is_ok() {
            record.attachments.remove(position);
        }
        self.cache.store(&record)?;
        deleted.map(|()| Some(detached))
    }
}
