//! plexus as a CNI plugin: what a runtime reaches through `type: "plexus"`.
//!
//! This build has no data plane yet, so it never pretends to attach anything:
//! ADD validates plexus's configuration and then fails with a clear error;
//! STATUS reports that ADD cannot be served (cni-SPEC §2 STATUS, code 50). DEL
//! and GC succeed: no ADD ever completed, so there is nothing to remove, and
//! DEL must be idempotent (cni-SPEC §2 DEL).

use std::io;

use crate::cni::error::{codes, CniError, ErrorCode};
use crate::cni::result::CniResult;
use crate::cni::skel::{self, Plugin, Request};
use crate::config::PlexusConf;

pub struct PlexusPlugin;

fn conf(req: &Request) -> Result<PlexusConf, CniError> {
    PlexusConf::from_value(&serde_json::Value::Object(req.config.clone()))
}

fn no_data_plane(what: &str) -> CniError {
    CniError::plugin(
        codes::NOT_IMPLEMENTED,
        "plexus cannot attach interfaces yet",
        format!("{what}: this build of plexus has no data plane; no interface was created"),
    )
}

impl Plugin for PlexusPlugin {
    fn add(&self, req: &Request) -> Result<CniResult, CniError> {
        conf(req)?;
        Err(no_data_plane("ADD"))
    }

    fn del(&self, req: &Request) -> Result<(), CniError> {
        // A broken conf must not block teardown: DEL is best-effort.
        let _ = conf(req);
        Ok(())
    }

    fn check(&self, req: &Request) -> Result<(), CniError> {
        conf(req)?;
        Err(no_data_plane("CHECK"))
    }

    fn gc(&self, req: &Request, _valid: &[(String, String)]) -> Result<(), CniError> {
        conf(req)?;
        Ok(())
    }

    fn status(&self, req: &Request) -> Result<(), CniError> {
        conf(req)?;
        Err(CniError::new(
            ErrorCode::NotAvailable,
            "plexus cannot service ADD requests",
            "this build of plexus has no data plane",
        ))
    }
}

/// Run the CNI protocol on this process's environment and standard streams.
pub fn run_as_plugin() -> i32 {
    skel::run(
        &PlexusPlugin,
        |key| std::env::var(key).ok(),
        &mut io::stdin().lock(),
        &mut io::stdout().lock(),
        &mut io::stderr().lock(),
    )
}
